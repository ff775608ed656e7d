# One Consul dev agent for a laptop: in-memory state (a restart loses all KV),
# UI on http://127.0.0.1:8500/ui/. Run: consul agent -dev -config-file=ops/consul/dev.hcl
node_name      = "zmqueue-dev"
bind_addr      = "127.0.0.1"
client_addr    = "127.0.0.1"
log_level      = "WARN"
ui             = true
ports {
  http     = 8500
  dns      = 8600
  serf_lan = 8301
  serf_wan = 8302
  server   = 8300
  grpc     = 8502
}
