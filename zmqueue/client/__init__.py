"""The zmqueue client library."""

from zmqueue.client.client import Client, connect
from zmqueue.client.models import Message, OutgoingMessage
from zmqueue.client.pipeline import PendingSend, SendPipeline
from zmqueue.client.queue import Queue
from zmqueue.client.receiver import ReceivePipeline
from zmqueue.client.subscription import Subscription

__all__ = ["Client", "Message", "OutgoingMessage", "PendingSend", "Queue", "ReceivePipeline", "SendPipeline",
           "Subscription", "connect"]
