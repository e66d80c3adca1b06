//go:build linux && (amd64 || arm64)

package seccomp

import "golang.org/x/sys/unix"

// The allow-list: every syscall a sandbox may make without an argument
// check. Anything on no list fails with ENOSYS, so a syscall a newer kernel
// adds is unreachable the day the host gets it, and libc falls back where
// it can. The need was measured (strace of a whole server running CPython
// with numpy, pandas, scipy, scikit-learn, matplotlib and sympy, the
// filesystem and network profiles, sessions, pip_install, and every default
// command plus bash: 108 syscalls after the filter is installed); the
// groups below add a reviewed margin of the same kinds, each named with why
// it is safe to reach from a sandbox that already has no capabilities, its
// own namespaces and Landlock. archAllowedSyscalls adds x86_64's legacy
// entry points (open, stat, fork, ...), which arm64 never had.
var allowedSyscalls = concat(
	processSyscalls,
	signalSyscalls,
	memorySyscalls,
	timeSyscalls,
	fdSyscalls,
	pathSyscalls,
	socketSyscalls,
	identitySyscalls,
	ipcSyscalls,
	selfRestrictSyscalls,
)

// processSyscalls run, wait for and schedule the sandbox's own processes and
// threads. clone and clone3 are handled by rules of their own; execve of a
// file is bounded by Landlock and noexec mounts, of a memfd by the pid
// namespace's vm.memfd_noexec (see MemfdExecSealed).
var processSyscalls = []sysno{
	{"execve", unix.SYS_EXECVE},
	{"execveat", unix.SYS_EXECVEAT},
	{"exit", unix.SYS_EXIT},
	{"exit_group", unix.SYS_EXIT_GROUP},
	{"wait4", unix.SYS_WAIT4},
	{"waitid", unix.SYS_WAITID},
	{"set_tid_address", unix.SYS_SET_TID_ADDRESS},
	{"set_robust_list", unix.SYS_SET_ROBUST_LIST},
	{"get_robust_list", unix.SYS_GET_ROBUST_LIST},
	{"rseq", unix.SYS_RSEQ},
	{"futex", unix.SYS_FUTEX}, // the futex2 calls (6.7+) are left out: libc has no use for them yet
	{"gettid", unix.SYS_GETTID},
	{"getpid", unix.SYS_GETPID},
	{"getppid", unix.SYS_GETPPID},
	{"prctl", unix.SYS_PRCTL}, // the privileged options need capabilities the sandbox lacks
	{"membarrier", unix.SYS_MEMBARRIER},
	{"restart_syscall", unix.SYS_RESTART_SYSCALL},
	{"sched_yield", unix.SYS_SCHED_YIELD},
	{"sched_getaffinity", unix.SYS_SCHED_GETAFFINITY},
	{"sched_setaffinity", unix.SYS_SCHED_SETAFFINITY}, // within the cgroup's cpuset
	{"sched_getparam", unix.SYS_SCHED_GETPARAM},
	{"sched_setparam", unix.SYS_SCHED_SETPARAM},
	{"sched_getscheduler", unix.SYS_SCHED_GETSCHEDULER},
	{"sched_setscheduler", unix.SYS_SCHED_SETSCHEDULER}, // realtime needs CAP_SYS_NICE
	{"sched_getattr", unix.SYS_SCHED_GETATTR},
	{"sched_setattr", unix.SYS_SCHED_SETATTR},
	{"sched_get_priority_max", unix.SYS_SCHED_GET_PRIORITY_MAX},
	{"sched_get_priority_min", unix.SYS_SCHED_GET_PRIORITY_MIN},
	{"sched_rr_get_interval", unix.SYS_SCHED_RR_GET_INTERVAL},
	{"getpriority", unix.SYS_GETPRIORITY},
	{"setpriority", unix.SYS_SETPRIORITY}, // only lowers priority without CAP_SYS_NICE
	{"getcpu", unix.SYS_GETCPU},
	{"pidfd_open", unix.SYS_PIDFD_OPEN},
	{"pidfd_send_signal", unix.SYS_PIDFD_SEND_SIGNAL},
	{"getrlimit", unix.SYS_GETRLIMIT},
	{"setrlimit", unix.SYS_SETRLIMIT}, // hard limits only go down
	{"prlimit64", unix.SYS_PRLIMIT64},
	{"getrusage", unix.SYS_GETRUSAGE},
	{"times", unix.SYS_TIMES},
	{"sysinfo", unix.SYS_SYSINFO},
	{"uname", unix.SYS_UNAME},
	{"getrandom", unix.SYS_GETRANDOM},
}

// signalSyscalls deliver and handle signals; the pid namespace limits whom
// they reach.
var signalSyscalls = []sysno{
	{"rt_sigaction", unix.SYS_RT_SIGACTION},
	{"rt_sigprocmask", unix.SYS_RT_SIGPROCMASK},
	{"rt_sigreturn", unix.SYS_RT_SIGRETURN},
	{"rt_sigpending", unix.SYS_RT_SIGPENDING},
	{"rt_sigtimedwait", unix.SYS_RT_SIGTIMEDWAIT},
	{"rt_sigqueueinfo", unix.SYS_RT_SIGQUEUEINFO},
	{"rt_tgsigqueueinfo", unix.SYS_RT_TGSIGQUEUEINFO},
	{"rt_sigsuspend", unix.SYS_RT_SIGSUSPEND},
	{"sigaltstack", unix.SYS_SIGALTSTACK},
	{"kill", unix.SYS_KILL},
	{"tkill", unix.SYS_TKILL},
	{"tgkill", unix.SYS_TGKILL},
	{"signalfd4", unix.SYS_SIGNALFD4},
	{"getitimer", unix.SYS_GETITIMER},
	{"setitimer", unix.SYS_SETITIMER},
	{"timer_create", unix.SYS_TIMER_CREATE},
	{"timer_settime", unix.SYS_TIMER_SETTIME},
	{"timer_gettime", unix.SYS_TIMER_GETTIME},
	{"timer_getoverrun", unix.SYS_TIMER_GETOVERRUN},
	{"timer_delete", unix.SYS_TIMER_DELETE},
}

// memorySyscalls manage the process's own memory, within the memory
// cgroup and RLIMIT_AS/MEMLOCK. Protection keys, mlockall and shadow
// stacks are left out (glibc 2.36 and the measured libraries use none). mbind and the mempolicy calls are used by
// NUMA-aware libraries (OpenBLAS); migrate_pages, move_pages and
// set_mempolicy_home_node act on other pages or processes and are left out.
var memorySyscalls = []sysno{
	{"brk", unix.SYS_BRK},
	{"mmap", unix.SYS_MMAP},
	{"munmap", unix.SYS_MUNMAP},
	{"mremap", unix.SYS_MREMAP},
	{"mprotect", unix.SYS_MPROTECT},
	{"madvise", unix.SYS_MADVISE},
	{"msync", unix.SYS_MSYNC},
	{"mincore", unix.SYS_MINCORE},
	{"mlock", unix.SYS_MLOCK},
	{"munlock", unix.SYS_MUNLOCK},
	{"mbind", unix.SYS_MBIND},
	{"get_mempolicy", unix.SYS_GET_MEMPOLICY},
	{"set_mempolicy", unix.SYS_SET_MEMPOLICY},
}

// timeSyscalls read clocks and sleep; setting a clock is denied.
var timeSyscalls = []sysno{
	{"clock_gettime", unix.SYS_CLOCK_GETTIME},
	{"clock_getres", unix.SYS_CLOCK_GETRES},
	{"clock_nanosleep", unix.SYS_CLOCK_NANOSLEEP},
	{"nanosleep", unix.SYS_NANOSLEEP},
	{"gettimeofday", unix.SYS_GETTIMEOFDAY},
	{"timerfd_create", unix.SYS_TIMERFD_CREATE},
	{"timerfd_settime", unix.SYS_TIMERFD_SETTIME},
	{"timerfd_gettime", unix.SYS_TIMERFD_GETTIME},
}

// fdSyscalls act on descriptors the process already holds. ioctl has a rule
// of its own. Left out: sync and syncfs (they flush the host's disks), and
// Linux AIO (nothing measured used it; io_uring is denied outright, since
// its operations bypass seccomp).
var fdSyscalls = []sysno{
	{"read", unix.SYS_READ},
	{"write", unix.SYS_WRITE},
	{"readv", unix.SYS_READV},
	{"writev", unix.SYS_WRITEV},
	{"pread64", unix.SYS_PREAD64},
	{"pwrite64", unix.SYS_PWRITE64},
	{"preadv", unix.SYS_PREADV},
	{"pwritev", unix.SYS_PWRITEV},
	{"preadv2", unix.SYS_PREADV2},
	{"pwritev2", unix.SYS_PWRITEV2},
	{"lseek", unix.SYS_LSEEK},
	{"close", unix.SYS_CLOSE},
	{"close_range", unix.SYS_CLOSE_RANGE},
	{"dup", unix.SYS_DUP},
	{"dup3", unix.SYS_DUP3},
	{"fcntl", unix.SYS_FCNTL},
	{"flock", unix.SYS_FLOCK},
	{"fsync", unix.SYS_FSYNC},
	{"fdatasync", unix.SYS_FDATASYNC},
	{"sync_file_range", unix.SYS_SYNC_FILE_RANGE},
	{"ftruncate", unix.SYS_FTRUNCATE},
	{"fallocate", unix.SYS_FALLOCATE},
	{"fadvise64", unix.SYS_FADVISE64},
	{"readahead", unix.SYS_READAHEAD},
	{"sendfile", unix.SYS_SENDFILE},
	{"splice", unix.SYS_SPLICE},
	{"tee", unix.SYS_TEE},
	{"vmsplice", unix.SYS_VMSPLICE},
	{"copy_file_range", unix.SYS_COPY_FILE_RANGE},
	{"getdents64", unix.SYS_GETDENTS64},
	{"fstat", unix.SYS_FSTAT},
	{"fstatfs", unix.SYS_FSTATFS},
	{"pipe2", unix.SYS_PIPE2},
	{"eventfd2", unix.SYS_EVENTFD2},
	{"epoll_create1", unix.SYS_EPOLL_CREATE1},
	{"epoll_ctl", unix.SYS_EPOLL_CTL},
	{"epoll_pwait", unix.SYS_EPOLL_PWAIT},
	{"epoll_pwait2", unix.SYS_EPOLL_PWAIT2},
	{"ppoll", unix.SYS_PPOLL},
	{"pselect6", unix.SYS_PSELECT6},
	// Extended attributes of the sandbox's own files (cp -a, tar, pip).
	{"getxattr", unix.SYS_GETXATTR},
	{"lgetxattr", unix.SYS_LGETXATTR},
	{"fgetxattr", unix.SYS_FGETXATTR},
	{"listxattr", unix.SYS_LISTXATTR},
	{"llistxattr", unix.SYS_LLISTXATTR},
	{"flistxattr", unix.SYS_FLISTXATTR},
	{"setxattr", unix.SYS_SETXATTR},
	{"lsetxattr", unix.SYS_LSETXATTR},
	{"fsetxattr", unix.SYS_FSETXATTR},
	{"removexattr", unix.SYS_REMOVEXATTR},
	{"lremovexattr", unix.SYS_LREMOVEXATTR},
	{"fremovexattr", unix.SYS_FREMOVEXATTR},
}

// pathSyscalls name files; the mount namespace, the read-only root and
// Landlock decide which they reach. mknodat makes FIFOs (device nodes need
// CAP_MKNOD).
var pathSyscalls = []sysno{
	{"openat", unix.SYS_OPENAT},
	{"openat2", unix.SYS_OPENAT2},
	{"newfstatat", fstatatNr},
	{"statx", unix.SYS_STATX},
	{"statfs", unix.SYS_STATFS},
	{"faccessat", unix.SYS_FACCESSAT},
	{"faccessat2", unix.SYS_FACCESSAT2},
	{"readlinkat", unix.SYS_READLINKAT},
	{"getcwd", unix.SYS_GETCWD},
	{"chdir", unix.SYS_CHDIR},
	{"fchdir", unix.SYS_FCHDIR},
	{"mkdirat", unix.SYS_MKDIRAT},
	{"mknodat", unix.SYS_MKNODAT},
	{"unlinkat", unix.SYS_UNLINKAT},
	{"renameat", unix.SYS_RENAMEAT},
	{"renameat2", unix.SYS_RENAMEAT2},
	{"linkat", unix.SYS_LINKAT},
	{"symlinkat", unix.SYS_SYMLINKAT},
	{"truncate", unix.SYS_TRUNCATE},
	{"fchmod", unix.SYS_FCHMOD},
	{"fchmodat", unix.SYS_FCHMODAT},
	{"fchmodat2", unix.SYS_FCHMODAT2},
	{"fchown", unix.SYS_FCHOWN},
	{"fchownat", unix.SYS_FCHOWNAT},
	{"umask", unix.SYS_UMASK},
	{"utimensat", unix.SYS_UTIMENSAT},
}

// socketSyscalls use sockets; socket and socketpair have rules of their
// own (address families), and the network namespace decides what a socket
// reaches.
var socketSyscalls = []sysno{
	{"connect", unix.SYS_CONNECT},
	{"accept", unix.SYS_ACCEPT},
	{"accept4", unix.SYS_ACCEPT4},
	{"bind", unix.SYS_BIND},
	{"listen", unix.SYS_LISTEN},
	{"getsockname", unix.SYS_GETSOCKNAME},
	{"getpeername", unix.SYS_GETPEERNAME},
	{"sendto", unix.SYS_SENDTO},
	{"recvfrom", unix.SYS_RECVFROM},
	{"sendmsg", unix.SYS_SENDMSG},
	{"recvmsg", unix.SYS_RECVMSG},
	{"sendmmsg", unix.SYS_SENDMMSG},
	{"recvmmsg", unix.SYS_RECVMMSG},
	{"shutdown", unix.SYS_SHUTDOWN},
	{"setsockopt", unix.SYS_SETSOCKOPT},
	{"getsockopt", unix.SYS_GETSOCKOPT},
}

// identitySyscalls read the process's credentials and sessions; the set*
// calls can only drop or keep ids (no CAP_SETUID), which su and sudo try.
var identitySyscalls = []sysno{
	{"getuid", unix.SYS_GETUID},
	{"geteuid", unix.SYS_GETEUID},
	{"getgid", unix.SYS_GETGID},
	{"getegid", unix.SYS_GETEGID},
	{"getresuid", unix.SYS_GETRESUID},
	{"getresgid", unix.SYS_GETRESGID},
	{"getgroups", unix.SYS_GETGROUPS},
	{"setuid", unix.SYS_SETUID},
	{"setgid", unix.SYS_SETGID},
	{"setreuid", unix.SYS_SETREUID},
	{"setregid", unix.SYS_SETREGID},
	{"setresuid", unix.SYS_SETRESUID},
	{"setresgid", unix.SYS_SETRESGID},
	{"setgroups", unix.SYS_SETGROUPS},
	{"setfsuid", unix.SYS_SETFSUID},
	{"setfsgid", unix.SYS_SETFSGID},
	{"capget", unix.SYS_CAPGET},
	{"capset", unix.SYS_CAPSET}, // can only drop
	{"setpgid", unix.SYS_SETPGID},
	{"getpgid", unix.SYS_GETPGID},
	{"setsid", unix.SYS_SETSID},
	{"getsid", unix.SYS_GETSID},
}

// ipcSyscalls are System V and POSIX IPC, private to the sandbox's IPC
// namespace (POSIX semaphores and shared memory are files in /dev/shm).
var ipcSyscalls = []sysno{
	{"shmget", unix.SYS_SHMGET},
	{"shmat", unix.SYS_SHMAT},
	{"shmdt", unix.SYS_SHMDT},
	{"shmctl", unix.SYS_SHMCTL},
	{"semget", unix.SYS_SEMGET},
	{"semop", unix.SYS_SEMOP},
	{"semtimedop", unix.SYS_SEMTIMEDOP},
	{"semctl", unix.SYS_SEMCTL},
	{"msgget", unix.SYS_MSGGET},
	{"msgsnd", unix.SYS_MSGSND},
	{"msgrcv", unix.SYS_MSGRCV},
	{"msgctl", unix.SYS_MSGCTL},
	{"mq_open", unix.SYS_MQ_OPEN},
	{"mq_unlink", unix.SYS_MQ_UNLINK},
	{"mq_timedsend", unix.SYS_MQ_TIMEDSEND},
	{"mq_timedreceive", unix.SYS_MQ_TIMEDRECEIVE},
	{"mq_notify", unix.SYS_MQ_NOTIFY},
	{"mq_getsetattr", unix.SYS_MQ_GETSETATTR},
}

// selfRestrictSyscalls only narrow what the caller may do (a program that
// sandboxes itself, as Chromium or a test runner does).
var selfRestrictSyscalls = []sysno{
	{"seccomp", unix.SYS_SECCOMP},
	{"landlock_create_ruleset", unix.SYS_LANDLOCK_CREATE_RULESET},
	{"landlock_add_rule", unix.SYS_LANDLOCK_ADD_RULE},
	{"landlock_restrict_self", unix.SYS_LANDLOCK_RESTRICT_SELF},
}

func concat(lists ...[]sysno) []sysno {
	var out []sysno
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
