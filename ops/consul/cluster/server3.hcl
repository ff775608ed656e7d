# Server 3 of a 3-server Consul cluster on one machine (127.0.0.1, distinct
# ports). Run: consul agent -config-file=ops/consul/cluster/server3.hcl
node_name        = "consul-3"
server           = true
bootstrap_expect = 3
data_dir         = ".zmqueue/consul-3-data"
bind_addr        = "127.0.0.1"
client_addr      = "127.0.0.1"
log_level        = "WARN"
ui               = true
retry_join       = ["127.0.0.1:8301", "127.0.0.1:8311"]
ports {
  http     = 8520
  dns      = 8620
  serf_lan = 8321
  serf_wan = 8322
  server   = 8320
  grpc     = 8522
}
