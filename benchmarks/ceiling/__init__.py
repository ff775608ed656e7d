"""Raw pyzmq on loopback: the machine's ceiling for any ZeroMQ design."""
