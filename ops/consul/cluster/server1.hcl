# Server 1 of a 3-server Consul cluster on one machine (127.0.0.1, distinct
# ports). Run: consul agent -config-file=ops/consul/cluster/server1.hcl
node_name        = "consul-1"
server           = true
bootstrap_expect = 3
data_dir         = ".zmqueue/consul-1-data"
bind_addr        = "127.0.0.1"
client_addr      = "127.0.0.1"
log_level        = "WARN"
ui               = true
retry_join       = ["127.0.0.1:8311", "127.0.0.1:8321"]
ports {
  http     = 8500
  dns      = 8600
  serf_lan = 8301
  serf_wan = 8302
  server   = 8300
  grpc     = 8502
}
