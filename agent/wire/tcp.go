package wire

// tcp-connect (feature "tcp-connect"): a byte stream to a TCP port on the
// sandbox's own loopback, how a dev server or a kernel inside is reached
// without giving the sandbox a network interface.
//
//	GET /tcp?port=N[&host=127.0.0.1|::1]
//	Connection: Upgrade
//	Upgrade: cordon-tcp
//
// answers 101 Switching Protocols once connected, and from then on the
// connection carries the stream's bytes both ways; a half-close (shutdown
// of one direction) passes on. A port nobody listens on answers 502
// connect_failed; a port out of 1-65535 or another host, 400.
//
// With &pass=1 (feature "tcp-pass"), from a host on the agent's unix
// socket that shares the sandbox's kernel (the process and container
// tiers), the connected socket itself travels to the host with the 101
// answer (SCM_RIGHTS, on the same write), marked by PassHeader; the agent
// keeps no copy and relays nothing. Elsewhere the parameter is ignored.
const (
	PassHeader        = "Cordon-Pass"
	RouteTCP          = "/tcp"
	UpgradeTCP        = "cordon-tcp"
	CodeConnectFailed = "connect_failed"
	CodeInvalidPort   = "invalid_port"
)
