/* Tests of the command policy (include/cae/policy.h): the deny list in every spelling, no
 * false positives, enforce mode and the allow-list knobs, the default prompt text, argv
 * checks, and hostile input. */
#include "base/macro.h"
#include "base/utf8.h"
#include "cae/policy.h"
#include "testutil.h"

#include <errno.h>

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_policy *, cae_policy_free)
#define _cleanup_policy_ _cleanup_(cae_policy_freep)

static cae_policy *new_default(void)
{
	cae_error err = {0};
	cae_policy *p = cae_policy_new(NULL, &err);
	ck_assert_msg(p != NULL, "cae_policy_new: %s", err.message);
	return p;
}

static cae_policy *new_with(const cae_policy_options *o)
{
	cae_error err = {0};
	cae_policy *p = cae_policy_new(o, &err);
	ck_assert_msg(p != NULL, "cae_policy_new: %s", err.message);
	return p;
}

static void check(const cae_policy *p, const char *cmd, cae_policy_verdict *v)
{
	ck_assert_int_eq(cae_policy_check(p, cmd, v), 0);
}

/* ---- the deny list, in every spelling ---- */

/* clang-format off */
static const struct {
	const char *cmd;
	const char *shown; /* what the reason names: "command '<shown>' is not allowed: ..." */
	const char *program;
} denied[] = {
	/* the spellings the deny list is written for */
	{"sudo ls", "sudo", "sudo"},
	{"/usr/bin/sudo ls", "sudo", "sudo"},
	{"FOO=1 sudo ls", "sudo", "sudo"},
	{"env sudo ls", "sudo", "sudo"},
	{"command sudo ls", "sudo", "sudo"},
	{"exec sudo ls", "sudo", "sudo"},
	{"echo a && sudo ls", "sudo", "sudo"},
	{"echo a; sudo ls", "sudo", "sudo"},
	{"ls | sudo tee x", "sudo", "sudo"},
	{"echo $(sudo id)", "sudo", "sudo"},
	{"echo `sudo id`", "sudo", "sudo"},
	{"rm -rf x", "rm -rf", "rm"},
	{"rm -fr x", "rm -rf", "rm"},
	{"rm -r -f x", "rm -rf", "rm"},
	{"rm -Rf x", "rm -rf", "rm"},
	{"rm --recursive --force x", "rm -rf", "rm"},
	{"chmod 777 f", "chmod 777", "chmod"},
	{"chmod -R 777 d", "chmod 777", "chmod"},
	{"mkfs.ext4 /dev/x", "mkfs.ext4", "mkfs.ext4"},
	{"nc -l 1", "nc", "nc"},
	{"ncat x", "ncat", "ncat"},
	{"ssh h", "ssh", "ssh"},
	{"(sudo ls)", "sudo", "sudo"},
	{"{ sudo ls; }", "sudo", "sudo"},
	{"if true; then sudo ls; fi", "sudo", "sudo"},
	{"echo one\necho two\nsudo ls\necho four", "sudo", "sudo"},
	{"bash -c 'sudo ls'", "sudo", "sudo"},
	{"echo \"$(sudo id)\"", "sudo", "sudo"},
	/* more rm and chmod spellings */
	{"rm -r --force x", "rm -rf", "rm"},
	{"rm --force -R x", "rm -rf", "rm"},
	{"rm --rec --for x", "rm -rf", "rm"},
	{"rm x -rf", "rm -rf", "rm"},
	{"rm -v -fR x", "rm -rf", "rm"},
	{"/bin/rm -rf /", "rm -rf", "rm"},
	{"chmod 0777 f", "chmod 777", "chmod"},
	{"chmod 1777 /tmp/x", "chmod 777", "chmod"},
	{"chmod -- 777 f", "chmod 777", "chmod"},
	{"chmod a+rwx f", "chmod 777", "chmod"},
	{"chmod ugo=rwx f", "chmod 777", "chmod"},
	/* every other deny-list program */
	{"su -", "su", "su"},
	{"chown u f", "chown", "chown"},
	{"mount /dev/x /mnt", "mount", "mount"},
	{"umount /mnt", "umount", "umount"},
	{"iptables -F", "iptables", "iptables"},
	{"ip6tables -F", "ip6tables", "ip6tables"},
	{"systemctl stop x", "systemctl", "systemctl"},
	{"service x stop", "service", "service"},
	{"kill 1", "kill", "kill"},
	{"killall x", "killall", "killall"},
	{"pkill x", "pkill", "pkill"},
	{"reboot", "reboot", "reboot"},
	{"shutdown -h now", "shutdown", "shutdown"},
	{"halt", "halt", "halt"},
	{"poweroff", "poweroff", "poweroff"},
	{"dd if=/dev/zero of=x", "dd", "dd"},
	{"mkfs /dev/x", "mkfs", "mkfs"},
	{"fdisk -l", "fdisk", "fdisk"},
	{"parted /dev/x", "parted", "parted"},
	{"netcat h 1", "netcat", "netcat"},
	{"nmap h", "nmap", "nmap"},
	{"scp a h:b", "scp", "scp"},
	{"rsync -a a h:b", "rsync", "rsync"},
	/* quoting and escapes do not hide a name */
	{"su''do ls", "sudo", "sudo"},
	{"s\\udo ls", "sudo", "sudo"},
	{"\"sudo\" ls", "sudo", "sudo"},
	{"$'\\x73udo' ls", "sudo", "sudo"},
	{"/usr/bin/su?o ls", "/usr/bin/su?o", "sudo"},
	/* wrappers */
	{"env -i PATH=/bin sudo ls", "sudo", "sudo"},
	{"env -u HOME sudo ls", "sudo", "sudo"},
	{"env -S 'sudo ls'", "sudo", "sudo"},
	{"command -p sudo ls", "sudo", "sudo"},
	{"exec -a x sudo ls", "sudo", "sudo"},
	{"nohup sudo ls &", "sudo", "sudo"},
	{"time sudo ls", "sudo", "sudo"},
	{"time -p sudo ls", "sudo", "sudo"},
	{"nice sudo ls", "sudo", "sudo"},
	{"nice -n 5 sudo ls", "sudo", "sudo"},
	{"timeout 10 sudo ls", "sudo", "sudo"},
	{"timeout -s KILL 5 sudo ls", "sudo", "sudo"},
	{"timeout --signal KILL 5 sudo ls", "sudo", "sudo"},
	{"stdbuf -o L sudo ls", "sudo", "sudo"},
	{"setsid sudo ls", "sudo", "sudo"},
	{"builtin sudo", "sudo", "sudo"},
	{"busybox rm -rf x", "rm -rf", "rm"},
	{"ls | xargs sudo rm", "sudo", "sudo"},
	{"find . | xargs -0 -n1 rm -rf", "rm -rf", "rm"},
	{"echo x | xargs -I{} sudo rm {}", "sudo", "sudo"},
	{"find . -exec rm -rf {} +", "rm -rf", "rm"},
	{"find . -name x -exec sudo cat {} \\;", "sudo", "sudo"},
	{"eval \"sudo ls\"", "sudo", "sudo"},
	{"eval sudo ls", "sudo", "sudo"},
	{"sh -c 'sudo ls'", "sudo", "sudo"},
	{"/bin/sh -ec 'sudo ls'", "sudo", "sudo"},
	{"bash -o pipefail -c 'sudo ls'", "sudo", "sudo"},
	{"dash -c \"echo hi; rm -rf /\"", "rm -rf", "rm"},
	{"sh -c \"sh -c 'sudo ls'\"", "sudo", "sudo"},
	{"alias x='sudo ls'", "sudo", "sudo"},
	{"trap 'sudo ls' EXIT", "sudo", "sudo"},
	{"! sudo ls", "sudo", "sudo"},
	{"coproc sudo ls", "sudo", "sudo"},
	/* bash: the time keyword, brace expansion */
	{"time { sudo ls; }", "sudo", "sudo"},
	{"time -p ( sudo ls )", "sudo", "sudo"},
	{"{sudo,x} ls", "sudo", "sudo"},
	{"s{u,x}do ls", "sudo", "sudo"},
	{"{{su,x}do,y} ls", "sudo", "sudo"},
	{"rm -{r,f} x", "rm -rf", "rm"},
	{"rm x{,.bak} -{f,r}", "rm -rf", "rm"},
	/* operators, compound commands, substitutions */
	{"false || sudo ls", "sudo", "sudo"},
	{"sleep 1 & sudo ls", "sudo", "sudo"},
	{"ls |& sudo tee x", "sudo", "sudo"},
	{"( (sudo ls) )", "sudo", "sudo"},
	{"((sudo ls) )", "sudo", "sudo"},
	{"while true; do sudo ls; done", "sudo", "sudo"},
	{"until false; do sudo ls; done", "sudo", "sudo"},
	{"for i in 1 2; do sudo ls; done", "sudo", "sudo"},
	{"for i in $(sudo ls); do echo $i; done", "sudo", "sudo"},
	{"if sudo ls; then echo; fi", "sudo", "sudo"},
	{"if false; then :; elif true; then :; else sudo ls; fi", "sudo", "sudo"},
	{"case x in a) sudo ls;; esac", "sudo", "sudo"},
	{"case x in (a|b) echo;; *) sudo ls;; esac", "sudo", "sudo"},
	{"case $(sudo id) in *) ;; esac", "sudo", "sudo"},
	{"case \"$1\" in\n  start)\n    echo start\n    ;;\n  *)\n    sudo ls\n    ;;\nesac",
	 "sudo", "sudo"},
	{"f() { sudo ls; }", "sudo", "sudo"},
	{"function f { sudo ls; }", "sudo", "sudo"},
	{"[[ -f x ]] && sudo ls", "sudo", "sudo"},
	{"((i++)) && sudo ls", "sudo", "sudo"},
	{"if true\nthen\n  sudo ls\nfi", "sudo", "sudo"},
	{"echo a \\\n  && sudo ls", "sudo", "sudo"},
	{"x=$(sudo id)", "sudo", "sudo"},
	{"a=(1 $(sudo id))", "sudo", "sudo"},
	{"echo ${x:-$(sudo id)}", "sudo", "sudo"},
	{"echo $((1 + $(sudo id)))", "sudo", "sudo"},
	{"echo $( (sudo ls) )", "sudo", "sudo"},
	{"echo $(echo $(echo $(sudo id)))", "sudo", "sudo"},
	{"echo \"`sudo id`\"", "sudo", "sudo"},
	{"echo `echo \\`sudo id\\``", "sudo", "sudo"},
	{"echo \"$(echo 'a)' ; sudo id)\"", "sudo", "sudo"},
	{"diff <(sudo cat a) b", "sudo", "sudo"},
	{"echo hi > >(sudo tee x)", "sudo", "sudo"},
	{"ls > $(sudo id)", "sudo", "sudo"},
	{"read -r x <<< \"$(sudo id)\"", "sudo", "sudo"},
	{"echo a#$(sudo id)", "sudo", "sudo"},
	{">out sudo ls", "sudo", "sudo"},
	{"2>/dev/null sudo ls", "sudo", "sudo"},
	{"echo a >f 2>&1 | sudo ls", "sudo", "sudo"},
	/* here-documents: the body is data, unless expanded */
	{"cat <<EOF\nhi\nEOF\nsudo ls", "sudo", "sudo"},
	{"cat <<A <<B\na\nA\nb\nB\nsudo ls", "sudo", "sudo"},
	{"cat <<EOF | sudo tee x\nbody\nEOF", "sudo", "sudo"},
	{"cat <<EOF\n$(sudo id)\nEOF", "sudo", "sudo"},
	{"cat <<EOF\n`sudo id`\nEOF", "sudo", "sudo"},
};
/* clang-format on */

START_TEST(deny_list_spellings)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	const char *cmd = denied[_i].cmd;
	check(p, cmd, &v);
	ck_assert_msg(!v.allowed, "allowed, should be denied: %s", cmd);
	ck_assert_msg(v.rule == CAE_POLICY_RULE_DENY_LIST, "%s: rule %d (%s)", cmd, v.rule,
		      v.reason);
	char want[256];
	snprintf(want, sizeof(want), "command '%s' is not allowed: ", denied[_i].shown);
	ck_assert_msg(strncmp(v.reason, want, strlen(want)) == 0, "%s: reason \"%s\"", cmd,
		      v.reason);
	ck_assert_msg(strlen(v.reason) > strlen(want), "%s: no reason after the name", cmd);
	ck_assert_str_eq(v.program, denied[_i].program);
	ck_assert_msg(v.command[0] != '\0', "%s: no command text", cmd);
}
END_TEST

START_TEST(deny_reasons_exact)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	check(p, "echo a && /usr/bin/sudo ls -la", &v);
	ck_assert_str_eq(v.reason, "command 'sudo' is not allowed: privilege escalation");
	ck_assert_str_eq(v.program, "sudo");
	ck_assert_str_eq(v.command, "/usr/bin/sudo ls -la");
	check(p, "rm -r -f build", &v);
	ck_assert_str_eq(v.reason, "command 'rm -rf' is not allowed: recursive forced deletion");
	ck_assert_str_eq(v.command, "rm -r -f build");
	check(p, "ls; chmod -R 0777 d", &v);
	ck_assert_str_eq(v.reason,
			 "command 'chmod 777' is not allowed: world-writable permissions");
	check(p, "ssh host", &v);
	ck_assert_str_eq(v.reason, "command 'ssh' is not allowed: remote login");
	/* the first refused command is the one reported */
	check(p, "ls; nmap h; sudo ls", &v);
	ck_assert_str_eq(v.program, "nmap");
	/* with an inner command, the command text is the inner one */
	check(p, "bash -c 'echo; sudo id'", &v);
	ck_assert_str_eq(v.command, "sudo id");
}
END_TEST

START_TEST(deny_stderr_text)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	check(p, "echo a; sudo ls", &v);
	_cleanup_free_ char *s = cae_policy_verdict_stderr(&v);
	ck_assert_str_eq(s, "command 'sudo' is not allowed: privilege escalation\n  in: sudo ls\n");
	check(p, "reboot", &v);
	_cleanup_free_ char *s2 = cae_policy_verdict_stderr(&v);
	ck_assert_str_eq(s2, "command 'reboot' is not allowed: controlling the system\n");
	check(p, "ls", &v);
	_cleanup_free_ char *s3 = cae_policy_verdict_stderr(&v);
	ck_assert_str_eq(s3, "");
	ck_assert_int_eq(CAE_POLICY_EXIT_CODE, 126);
}
END_TEST

/* ---- no false positives ---- */

/* clang-format off */
static const char *const allowed[] = {
	"echo \"sudo is a word\"",
	"grep -rf pats .",
	"git log --format=%s",
	"rm file.txt",
	"chmod +x s.sh",
	"pytest -k \"not ssh\"",
	"echo 'rm -rf /'",
	"cat <<EOF\nsudo\nEOF",
	"ls -la | grep foo && make test",
	/* more words that only look like denied commands */
	"echo sudo; ls",
	"grep -rn \"rm -rf\" .",
	"grep -rn 'sudo ls' src/",
	"npm test -- --grep \"ssh\"",
	"git commit -m \"fix: don't sudo\"",
	"echo '$(sudo id)'",
	"echo \"\\`sudo id\\`\"",
	"echo \\`sudo id\\`",
	"ls # it's fine; sudo ls",
	"echo #comment $(sudo id)",
	"cat <<'EOF'\n$(sudo id)\nEOF",
	"cat <<\"EOF\"\n`sudo id`\nEOF",
	"cat <<-EOF\n\tsudo ls\n\tEOF",
	"cat <<A <<B\nsudo\nA\nsudo\nB\necho ok",
	"x=$(cat <<EOF\nsudo\nEOF\n)",
	"python3 - <<'PY'\nimport os\nprint(\")\")\nPY",
	"command -v sudo",
	"type sudo",
	"which ssh",
	"sudoku",
	"ssh-keygen -l -f key.pub",
	"mkfsx",
	"rm -r build",
	"rm -f x.o",
	"rm -i -v x",
	"ls -- -rf",
	"chmod 755 f",
	"chmod u+rwx f",
	"chmod -R go-w d",
	"chmod 644 777",
	"awk '{print $1}' f | sort | uniq -c",
	"sed -e \"s/(/[/g\" f",
	"ls [ab]* @(x|y)",
	"echo $# $? $$ $! $0 $@",
	"printf \"%s\\n\" \"$(git log --format=%H -1)\"",
	"ls |& grep x",
	"ls &>/dev/null & wait",
	"exec >log 2>&1",
	"for ((i=0;i<3;i++)); do echo $i; done",
	"echo $(( (1+2) * 3 ))",
	"select x in a b; do echo $x; done",
	"cat file | while read l; do echo \"$l\"; done",
	"case x in a) echo a;; esac",
	"echo $(case x in a) echo a;; esac)",
	"[ \"$a\" = b ] || exit 1",
	"[[ $x =~ ^(a|b)$ ]] && echo y",
	"f() { echo hi; }; f",
	"cd /tmp && tar -xzf a.tar.gz",
	"export PATH=$HOME/bin:$PATH; make",
	"FOO=1 BAR=\"a b\" make",
	"x=1 y=2",
	"arr=(a b c); echo ${arr[@]}",
	"git diff HEAD~1 -- src/ | head -50",
	"find . -name \"*.py\" -exec grep -l foo {} +",
	"find . -type f | xargs wc -l",
	"sh -c 'echo hi'",
	"bash script.sh",
	"eval echo hi",
	"",
	"   ",
	"# just a comment",
	"ls;",
	"echo a \\\n  b",
	"$CMD ls",
	"`echo ls`",
	"echo {a,b}{c,d} {1..3} {} {x",
	"{x,sudo} ls",
	"\"{sudo,x}\" ls",
	"rm -{r,v} x",
	"echo ${x,,} ${y:+{a,b}}",
	"time make",
};
/* clang-format on */

START_TEST(allowed_no_false_positives)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	check(p, allowed[_i], &v);
	ck_assert_msg(v.allowed, "denied, should be allowed: %s -> %s", allowed[_i], v.reason);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_NONE);
	ck_assert_str_eq(v.reason, "");
}
END_TEST

/* ---- enforce and the allow-list knobs ---- */

START_TEST(enforce_refuses_unknown)
{
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.enforce = true;
	_cleanup_policy_ cae_policy *p = new_with(&o);
	ck_assert(cae_policy_enforced(p));
	cae_policy_verdict v;

	static const char *const ok[] = {
	    "ls -la",
	    "git status",
	    "git -C sub diff",
	    "cargo test",
	    "cargo +nightly build",
	    "cd src && make",
	    "export A=1; true",
	    "[ -f x ] && echo y",
	    "test -d x",
	    "bash -c 'ls'",
	    "env",
	    "env FOO=1 ls",
	    "find . | xargs grep x",
	    "timeout 5 pytest",
	    "FOO=bar",
	    "python3 -m pytest",
	    "npm run build",
	    "dotnet test",
	    "for f in *.c; do wc -l \"$f\"; done",
	    "command -v gcc",
	    "time make",
	    "pwd; echo $(ls)",
	    "x=1; unset x; read -r y < f",
	};
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		check(p, ok[i], &v);
		ck_assert_msg(v.allowed, "enforce refused %s: %s", ok[i], v.reason);
	}

	static const struct {
		const char *cmd, *reason;
	} refused[] = {
	    {"gcc x.c", "command 'gcc' is not allowed: not in the allowed command list"},
	    {"ls && foo", "command 'foo' is not allowed: not in the allowed command list"},
	    {"git push", "command 'git push' is not allowed: not in the allowed command list"},
	    {"./build.sh", "command 'build.sh' is not allowed: not in the allowed command list"},
	    {"bash x.sh", "command 'bash' is not allowed: not in the allowed command list"},
	    {"bash -c 'gcc x'", "command 'gcc' is not allowed: not in the allowed command list"},
	    {"echo $(date)", "command 'date' is not allowed: not in the allowed command list"},
	    {"find . -exec gcc {} +",
	     "command 'gcc' is not allowed: not in the allowed command list"},
	    {"source env.sh", "command 'source' is not allowed: not in the allowed command list"},
	    {"$CMD ls",
	     "command '$CMD' is not allowed: the program name is only known at run time"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		check(p, refused[i].cmd, &v);
		ck_assert_msg(!v.allowed, "enforce allowed %s", refused[i].cmd);
		ck_assert_int_eq(v.rule, CAE_POLICY_RULE_NOT_ALLOWED);
		ck_assert_str_eq(v.reason, refused[i].reason);
	}
	/* the deny list still comes first, with its own reason */
	check(p, "sudo ls", &v);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_DENY_LIST);
}
END_TEST

START_TEST(not_enforced_by_default)
{
	_cleanup_policy_ cae_policy *p = new_default();
	ck_assert(!cae_policy_enforced(p));
	cae_policy_verdict v;
	check(p, "gcc -o x x.c && ./x && git push", &v);
	ck_assert(v.allowed);
}
END_TEST

START_TEST(additional_and_exclude)
{
	const char *add[] = {"custom-build-tool", "  project-specific-script ", "git  push",
			     "pytest"};
	const char *exc[] = {"curl", "wget", "git"};
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.enforce = true;
	o.additional = (cae_policy_list){add, ARRAY_SIZE(add)};
	o.exclude = (cae_policy_list){exc, ARRAY_SIZE(exc)};
	_cleanup_policy_ cae_policy *p = new_with(&o);
	cae_policy_verdict v;

	check(p, "custom-build-tool --all && project-specific-script", &v);
	ck_assert_msg(v.allowed, "%s", v.reason);
	check(p, "git push origin main", &v);
	ck_assert_msg(v.allowed, "%s", v.reason);
	check(p, "curl -s http://x", &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.reason,
			 "command 'curl' is not allowed: not in the allowed command list");
	check(p, "wget x", &v);
	ck_assert(!v.allowed);
	/* excluding "git" removed every "git ..." entry */
	check(p, "git status", &v);
	ck_assert(!v.allowed);
	ck_assert(!cae_policy_is_listed(p, "git status"));
	ck_assert(cae_policy_is_listed(p, "git push"));
	ck_assert(cae_policy_is_listed(p, " project-specific-script"));
	ck_assert(cae_policy_is_listed(p, "npm"));

	_cleanup_free_ char *text = cae_policy_allowed_text(p);
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(strstr(text, "\nVersion Control:") == NULL, "%s", text);
	ck_assert_msg(strstr(text, "\nUtilities: echo, pwd, cd, mkdir, rm, cp, mv, touch, chmod, "
				   "env, which, tar, unzip, jq, sed, awk, sort, uniq, xargs\n"),
		      "%s", text);
	ck_assert_msg(strstr(text, "\nCustom: custom-build-tool, project-specific-script, git "
				   "push") != NULL,
		      "%s", text);
	/* pytest was already there: not twice */
	ck_assert_msg(strstr(text, "Test Execution: pytest, jest,") && !strstr(text, ", pytest"),
		      "%s", text);

	json_t *j = cae_policy_allowed_json(p);
	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "version_control")), 0);
	json_t *custom = json_object_get(j, "custom");
	ck_assert_uint_eq(json_array_size(custom), 3);
	ck_assert_str_eq(json_string_value(json_array_get(custom, 2)), "git push");
	json_decref(j);
}
END_TEST

START_TEST(custom_list_replaces_default)
{
	const char *list[] = {"npm", "python", "grep", "my-tool"};
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.use_default = false;
	o.enforce = true;
	o.custom_list = (cae_policy_list){list, ARRAY_SIZE(list)};
	_cleanup_policy_ cae_policy *p = new_with(&o);
	cae_policy_verdict v;
	check(p, "npm install && python x.py | grep y; my-tool", &v);
	ck_assert_msg(v.allowed, "%s", v.reason);
	check(p, "ls", &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.program, "ls");
	check(p, "cd x; echo y", &v); /* builtins stay fine */
	ck_assert(v.allowed);

	_cleanup_free_ char *text = cae_policy_allowed_text(p);
	ck_assert_str_eq(text, "Build/Package Management: npm, python\n"
			       "File Operations: grep\n"
			       "Custom: my-tool");
	json_t *j = cae_policy_allowed_json(p);
	const char *keys[] = {
	    "build_package", "test",  "linter_formatter", "file_operations", "version_control",
	    "utilities",     "custom"};
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		ck_assert_msg(json_is_array(json_object_get(j, keys[i])), "key %s", keys[i]);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "build_package")), 2);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "test")), 0);
	json_decref(j);
}
END_TEST

START_TEST(empty_entry_is_an_error)
{
	const char *add[] = {"ok", "   "};
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.additional = (cae_policy_list){add, ARRAY_SIZE(add)};
	cae_error err = {0};
	ck_assert_ptr_null(cae_policy_new(&o, &err));
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_str_eq(err.message, "allowed_commands.additional[1]: empty entry");
}
END_TEST

/* ---- the default prompt text ("Label: a, b, c" per category) and the structured list ---- */

START_TEST(default_text_is_the_seeds)
{
	_cleanup_policy_ cae_policy *p = new_default();
	_cleanup_free_ char *text = cae_policy_allowed_text(p);
	ck_assert_str_eq(
	    text, "Build/Package Management: npm, yarn, pnpm, pip, pip3, conda, mamba, python, "
		  "python3, cargo, make, cmake, bundle, gem, composer, dotnet\n"
		  "Test Execution: pytest, jest, mocha, rspec, phpunit, cargo test, dotnet test\n"
		  "Linter/Formatter: eslint, prettier, black, flake8, pylint, mypy, rubocop, "
		  "rustfmt, clippy, tsc\n"
		  "File Operations: ls, cat, head, tail, grep, find, wc, diff, tree, file, stat\n"
		  "Version Control: git status, git diff, git log, git branch, git show, git "
		  "blame\n"
		  "Utilities: echo, pwd, cd, mkdir, rm, cp, mv, touch, chmod, env, which, curl, "
		  "wget, tar, unzip, jq, sed, awk, sort, uniq, xargs");
}
END_TEST

START_TEST(default_json_categories)
{
	_cleanup_policy_ cae_policy *p = new_default();
	json_t *j = cae_policy_allowed_json(p);
	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(json_object_size(j), 6);
	static const struct {
		const char *key;
		size_t n;
		const char *first, *last;
	} want[] = {
	    {"build_package", 16, "npm", "dotnet"},
	    {"test", 7, "pytest", "dotnet test"},
	    {"linter_formatter", 10, "eslint", "tsc"},
	    {"file_operations", 11, "ls", "stat"},
	    {"version_control", 6, "git status", "git blame"},
	    {"utilities", 21, "echo", "xargs"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		json_t *a = json_object_get(j, want[i].key);
		ck_assert_msg(json_is_array(a), "%s", want[i].key);
		ck_assert_uint_eq(json_array_size(a), want[i].n);
		ck_assert_str_eq(json_string_value(json_array_get(a, 0)), want[i].first);
		ck_assert_str_eq(json_string_value(json_array_get(a, want[i].n - 1)), want[i].last);
	}
	json_decref(j);
	ck_assert_str_eq(cae_policy_category_key(CAE_POLICY_CAT_LINTER_FORMATTER),
			 "linter_formatter");
	ck_assert_str_eq(cae_policy_category_label(CAE_POLICY_CAT_BUILD_PACKAGE),
			 "Build/Package Management");
}
END_TEST

/* ---- direct argv execution ---- */

START_TEST(argv_checks)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	const char *a1[] = {"/usr/bin/sudo", "ls", NULL};
	ck_assert_int_eq(cae_policy_check_argv(p, a1, &v), 0);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.reason, "command 'sudo' is not allowed: privilege escalation");
	ck_assert_str_eq(v.command, "/usr/bin/sudo ls");
	const char *a2[] = {"rm", "-r", "--force", "x", NULL};
	cae_policy_check_argv(p, a2, &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.program, "rm");
	const char *a3[] = {"chmod", "0777", "f", NULL};
	cae_policy_check_argv(p, a3, &v);
	ck_assert(!v.allowed);
	const char *a4[] = {"sh", "-c", "echo hi && sudo ls", NULL};
	cae_policy_check_argv(p, a4, &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.command, "sudo ls");
	const char *a5[] = {"env", "FOO=1", "timeout", "5", "ssh", "h", NULL};
	cae_policy_check_argv(p, a5, &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.program, "ssh");
	/* no shell: operators and quotes are plain argument text */
	const char *a6[] = {"echo", "; sudo ls", "$(sudo id)", NULL};
	cae_policy_check_argv(p, a6, &v);
	ck_assert_msg(v.allowed, "%s", v.reason);
	const char *a7[] = {"grep", "-rf", "pats", ".", NULL};
	cae_policy_check_argv(p, a7, &v);
	ck_assert(v.allowed);
	/* argv[0] "FOO=1" is a program name, not an assignment */
	const char *a8[] = {"FOO=1", "sudo", NULL};
	cae_policy_check_argv(p, a8, &v);
	ck_assert(v.allowed);
	const char *a9[] = {"bash", "-c", "echo 'x", NULL};
	cae_policy_check_argv(p, a9, &v);
	ck_assert(!v.allowed);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_PARSE);
	const char *a10[] = {NULL};
	cae_policy_check_argv(p, a10, &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.reason, "empty command");
}
END_TEST

START_TEST(argv_enforce)
{
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.enforce = true;
	_cleanup_policy_ cae_policy *p = new_with(&o);
	cae_policy_verdict v;
	const char *a1[] = {"git", "status", "--short", NULL};
	cae_policy_check_argv(p, a1, &v);
	ck_assert(v.allowed);
	const char *a2[] = {"git", "push", NULL};
	cae_policy_check_argv(p, a2, &v);
	ck_assert(!v.allowed);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_NOT_ALLOWED);
	const char *a3[] = {"$CMD", NULL}; /* literal, not an expansion: an unknown program */
	cae_policy_check_argv(p, a3, &v);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.reason,
			 "command '$CMD' is not allowed: not in the allowed command list");
}
END_TEST

/* ---- input the shell would refuse, and hostile input ---- */

/* clang-format off */
static const char *const unparsable[] = {
	"echo 'abc", "echo \"abc", "echo $(ls", "echo `ls", "(ls", "ls)", "echo ${x",
	"echo $'abc", "ls >", "echo (", "[[ -f x", "case x in a) ls", "x=(1 2",
	"echo \\$(sudo id)", "sudo ls 'x", "echo ok; ls 'x",
};
/* clang-format on */

START_TEST(unparsable_is_denied)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	const char *cmd = unparsable[_i];
	check(p, cmd, &v);
	ck_assert_msg(!v.allowed, "allowed: %s", cmd);
	ck_assert_msg(v.rule == CAE_POLICY_RULE_PARSE, "%s: %s", cmd, v.reason);
	ck_assert_msg(strncmp(v.reason, "could not parse the command line: ", 34) == 0, "%s: %s",
		      cmd, v.reason);
}
END_TEST

START_TEST(unterminated_quote_reason)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	check(p, "echo 'abc", &v);
	ck_assert_str_eq(v.reason,
			 "could not parse the command line: unterminated single quote (at byte 5)");
	check(p, "sh -c \"echo 'x\"", &v);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_PARSE);
	ck_assert_str_eq(v.reason, "could not parse the command string of sh -c: unterminated "
				   "single quote (at byte 5)");
}
END_TEST

static char *repeat(const char *pre, const char *unit, size_t n, const char *post)
{
	size_t ul = strlen(unit), pl = strlen(pre), tl = strlen(post);
	char *s = malloc(pl + ul * n + tl + 1);
	ck_assert_ptr_nonnull(s);
	memcpy(s, pre, pl);
	for (size_t i = 0; i < n; i++)
		memcpy(s + pl + i * ul, unit, ul);
	memcpy(s + pl + n * ul, post, tl + 1);
	return s;
}

START_TEST(deep_nesting_is_denied)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	static const char *const units[][3] = {
	    {"echo ", "$(", ")"},
	    {"", "( ", " )"},
	    {"echo ", "${x:-", "}"},
	    {"echo ", "$((", "))"},
	    {"cat ", "<(", ")"},
	    {"echo ", "\"$(", ")\""},
	    {"", "case x in a) ", ";; esac"},
	    {"echo ", "$( (", ") )"},
	};
	for (size_t u = 0; u < ARRAY_SIZE(units); u++) {
		_cleanup_free_ char *open = repeat(units[u][0], units[u][1], 1000, "ls");
		_cleanup_free_ char *s = repeat(open, units[u][2], 1000, "");
		check(p, s, &v);
		ck_assert_msg(!v.allowed, "allowed: unit %s", units[u][1]);
		ck_assert_msg(v.rule == CAE_POLICY_RULE_LIMIT, "unit %s: rule %d %s", units[u][1],
			      v.rule, v.reason);
		ck_assert_msg(strstr(v.reason, "nested more than 32 levels deep"), "unit %s: %s",
			      units[u][1], v.reason);
	}
	/* nesting through sh -c, eval and find -exec */
	_cleanup_free_ char *ev = repeat("", "eval ", 100, "ls");
	check(p, ev, &v);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_LIMIT);
	_cleanup_free_ char *fe = repeat("", "find . -exec ", 100, "ls ;");
	check(p, fe, &v);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_LIMIT);
	_cleanup_free_ char *shc = repeat("", "sh -c \"", 1, "sh -c 'sh -c \"sudo ls\"'\"");
	check(p, shc, &v);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_PARSE); /* the quotes do not nest like that */
	/* 20 levels are fine, and what is inside is still checked */
	_cleanup_free_ char *open = repeat("echo ", "$(", 20, "sudo id");
	_cleanup_free_ char *ok = repeat(open, ")", 20, "");
	check(p, ok, &v);
	ck_assert_str_eq(v.program, "sudo");
	ck_assert_str_eq(v.command, "sudo id");
}
END_TEST

START_TEST(long_input)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	_cleanup_free_ char *mb = repeat("", "echo a; ", 131072, "");
	check(p, mb, &v);
	ck_assert(!v.allowed);
	ck_assert_int_eq(v.rule, CAE_POLICY_RULE_LIMIT);
	ck_assert_str_eq(v.reason, "command line is too long (1048576 bytes, at most 131072)");
	/* just under the bound: checked in full */
	_cleanup_free_ char *big = repeat("", "echo a; ", 16000, "sudo ls");
	check(p, big, &v);
	ck_assert_str_eq(v.program, "sudo");

	/* a 256 KiB line of each awkward unit, with the bound raised: a verdict, no crash */
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.max_length = 2u << 20;
	_cleanup_policy_ cae_policy *q = new_with(&o);
	static const char *const units[] = {
	    "( ",     "$(",    "`",  "\"", "'", "\\",	 "${",	   "$((",   "{ ",	 "if ",
	    "x=(",    "<<E\n", ";;", "\n", ")", "$'\\",	 "@(",	   "a() ",  "for x in ", "[[ ",
	    "sh -c ", "|",     "&",  "#",  "{", "{a,b}", "{a,{b,", "time ",
	};
	for (size_t u = 0; u < ARRAY_SIZE(units); u++) {
		_cleanup_free_ char *s = repeat("", units[u], (256u << 10) / strlen(units[u]), "");
		ck_assert_int_eq(cae_policy_check(q, s, &v), 0);
		ck_assert_msg(cae__utf8_is_valid(v.reason, strlen(v.reason)), "unit %s", units[u]);
	}
}
END_TEST

START_TEST(brace_expansion_is_bounded)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	/* 2^20 words if expanded in full: expansion stops, but nothing after it is lost */
	_cleanup_free_ char *many = repeat("s{u,x}do ", "{a,b}", 20, " ls");
	check(p, many, &v);
	ck_assert_str_eq(v.program, "sudo");
	_cleanup_free_ char *after = repeat("rm ", "{a,b}", 20, " -rf x");
	check(p, after, &v);
	ck_assert_str_eq(v.program, "rm");
	_cleanup_free_ char *within = repeat("rm -{r,f}", "{a,b}", 20, " x");
	check(p, within, &v);
	ck_assert_str_eq(v.program, "rm");
	_cleanup_free_ char *name = repeat("s{u,x}do", "{,}", 20, " ls");
	check(p, name, &v);
	ck_assert_str_eq(v.program, "sudo");
	/* deep nesting of groups, and a word past the expansion bound */
	_cleanup_free_ char *open = repeat("echo ", "{a,", 3000, "b");
	_cleanup_free_ char *deep = repeat(open, "}", 3000, "");
	check(p, deep, &v);
	ck_assert(v.allowed);
	_cleanup_free_ char *huge = repeat("echo ", "{a,b}", 20000, "");
	check(p, huge, &v);
	ck_assert(v.allowed);
}
END_TEST

START_TEST(nul_and_binary_input)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	const char s[] = "echo a\0; sudo ls";
	ck_assert_int_eq(cae_policy_check_n(p, s, sizeof(s) - 1, &v), 0);
	ck_assert(!v.allowed);
	ck_assert_str_eq(v.program, "sudo");

	cae_policy_options o;
	cae_policy_options_init(&o);
	o.enforce = true;
	_cleanup_policy_ cae_policy *q = new_with(&o);
	/* a program name with invalid UTF-8 and control characters: the verdict stays clean */
	check(q, "$'\\xff\\x01bad\\n' x", &v);
	ck_assert(!v.allowed);
	ck_assert(cae__utf8_is_valid(v.reason, strlen(v.reason)));
	ck_assert(cae__utf8_is_valid(v.program, strlen(v.program)));
	for (const char *c = v.reason; *c; c++)
		ck_assert_int_ge((unsigned char)*c, 0x20);
	ck_assert_msg(strstr(v.reason, "\xef\xbf\xbd"), "%s", v.reason);
	/* a very long program name is cut, at a character boundary, with "..." */
	_cleanup_free_ char *longname = repeat("", "\xc3\xa9", 5000, " x");
	check(q, longname, &v);
	ck_assert(!v.allowed);
	ck_assert_uint_lt(strlen(v.program), CAE_POLICY_PROGRAM_MAX);
	ck_assert(cae__utf8_is_valid(v.program, strlen(v.program)));
	ck_assert_msg(strstr(v.program, "...") != NULL, "%s", v.program);
	ck_assert(cae__utf8_is_valid(v.command, strlen(v.command)));
	ck_assert(cae__utf8_is_valid(v.reason, strlen(v.reason)));
}
END_TEST

START_TEST(bad_arguments)
{
	_cleanup_policy_ cae_policy *p = new_default();
	cae_policy_verdict v;
	ck_assert_int_eq(cae_policy_check(p, NULL, &v), -EINVAL);
	ck_assert(!v.allowed);
	ck_assert_int_eq(cae_policy_check(NULL, "ls", &v), -EINVAL);
	ck_assert(!v.allowed);
	ck_assert_int_eq(cae_policy_check(p, "ls", NULL), -EINVAL);
	cae_policy_free(NULL);
	ck_assert_ptr_null(cae_policy_allowed_json(NULL));
	ck_assert_ptr_null(cae_policy_allowed_text(NULL));
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("policy");
	TCase *tc = tcase_create("deny");
	tcase_add_loop_test(tc, deny_list_spellings, 0, (int)ARRAY_SIZE(denied));
	tcase_add_test(tc, deny_reasons_exact);
	tcase_add_test(tc, deny_stderr_text);
	suite_add_tcase(s, tc);

	tc = tcase_create("allow");
	tcase_add_loop_test(tc, allowed_no_false_positives, 0, (int)ARRAY_SIZE(allowed));
	suite_add_tcase(s, tc);

	tc = tcase_create("lists");
	tcase_add_test(tc, enforce_refuses_unknown);
	tcase_add_test(tc, not_enforced_by_default);
	tcase_add_test(tc, additional_and_exclude);
	tcase_add_test(tc, custom_list_replaces_default);
	tcase_add_test(tc, empty_entry_is_an_error);
	tcase_add_test(tc, default_text_is_the_seeds);
	tcase_add_test(tc, default_json_categories);
	tcase_add_test(tc, argv_checks);
	tcase_add_test(tc, argv_enforce);
	suite_add_tcase(s, tc);

	tc = tcase_create("hostile");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, unparsable_is_denied, 0, (int)ARRAY_SIZE(unparsable));
	tcase_add_test(tc, unterminated_quote_reason);
	tcase_add_test(tc, deep_nesting_is_denied);
	tcase_add_test(tc, long_input);
	tcase_add_test(tc, brace_expansion_is_bounded);
	tcase_add_test(tc, nul_and_binary_input);
	tcase_add_test(tc, bad_arguments);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
