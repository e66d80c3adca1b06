package jail

import "strconv"

// Accounts are a sandbox's passwd and group: root, its user (uid, with
// home) and nobody. With root inside, root has a shell, and apt fetches
// as _apt (as root it warns that it fetches unsandboxed); Debian gives
// _apt nogroup, 65534, which a machine's ids (0 to MachineIDs-1) do not
// map: a group of its own. Shared by both backends' generated /etc.
func Accounts(home string, uid int, rootInside bool) (passwd, group string) {
	id := strconv.Itoa(uid)
	user := UserOf(home)
	rootShell, system, systemGroups := "/usr/sbin/nologin", "", ""
	if rootInside {
		rootShell = "/bin/sh"
		system, systemGroups = "_apt:x:42:42::/nonexistent:/usr/sbin/nologin\n", "_apt:x:42:\n"
	}
	passwd = "root:x:0:0:root:/root:" + rootShell + "\n" + system +
		user + ":x:" + id + ":" + id + ":" + user + ":" + home + ":/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group = "root:x:0:\n" + systemGroups + user + ":x:" + id + ":\nnogroup:x:65534:\n"
	return passwd, group
}
