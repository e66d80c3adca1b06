package jail

// SudoPath is the machine's sudo, in a directory of its own that a
// machine's PATH leads with, so that no root's own (set-user-ID, hence
// useless here) comes first.
const SudoPath = "/opt/codecage/sbin/sudo"

// SudoSocket is where the init of a machine with root inside listens.
const SudoSocket = "/opt/codecage/run/sudo.sock"
