// Package host holds what every tier does on the host side of a sandbox,
// so that no tier imports another: the identity files and shared
// directories, the layout's id-mapped mounts, the block of host ids a
// sandbox maps, the egress socket, and the agent's environment. Each tier
// renders the baseline (package baseline) with these; none owns them.
package host
