module github.com/codecage/codecage

go 1.26.8

require (
	github.com/landlock-lsm/go-landlock v0.11.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
)

require kernel.org/pub/linux/libs/security/libcap/psx v1.2.77 // indirect
