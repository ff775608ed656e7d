# Server 2 of a 3-server Consul cluster on one machine (127.0.0.1, distinct
# ports). Run: consul agent -config-file=ops/consul/cluster/server2.hcl
node_name        = "consul-2"
server           = true
bootstrap_expect = 3
data_dir         = ".zmqueue/consul-2-data"
bind_addr        = "127.0.0.1"
client_addr      = "127.0.0.1"
log_level        = "WARN"
ui               = true
retry_join       = ["127.0.0.1:8301", "127.0.0.1:8321"]
ports {
  http     = 8510
  dns      = 8610
  serf_lan = 8311
  serf_wan = 8312
  server   = 8310
  grpc     = 8512
}
