/* The command-line program, driven as a user drives it: build/cae as a subprocess. JSON on
 * stdout, logs on stderr, exit statuses that reflect the outcome, --help everywhere, and state
 * shared between separate invocations (processes). */
#include "base/macro.h"
#include "cae/runner.h"
#include "testutil.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char *cae_path;
static char *state;

typedef struct out {
	int status;
	char *out;
	char *err;
	json_t *json;
} out;

static void out_clear(out *o)
{
	free(o->out);
	free(o->err);
	json_decref(o->json);
}

/* Runs cae with the arguments (NULL-terminated) and CAE_STATE_DIR set to the test's state. */
static out cae(const char *first, ...)
{
	const char *argv[64];
	size_t n = 0;
	argv[n++] = cae_path;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a && n < 63; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	setenv("CAE_STATE_DIR", state, 1);
	setenv("EXECUTOR_BACKEND", "local", 1);
	cae_run_spec spec = {
	    .argv = argv, .timeout_ms = 120000, .max_stdout = 16 << 20, .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_msg(cae_runner_run(&spec, &r, &err) == 0, "%s", err.message);
	out o = {.status = r.exit_code, .out = r.out, .err = r.err};
	o.json = json_loads(r.out, 0, NULL);
	return o;
}

static char *make_repo(void)
{
	char *d = tu_mkdtemp();
	char script[1024];
	snprintf(script, sizeof(script),
		 "cd %s && git init -q -b main && echo 'hello' > readme.txt && git add . && "
		 "git -c user.email=t@e -c user.name=t commit -qm init",
		 d);
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	ck_assert_int_eq(cae_runner_run(&spec, &r, NULL), 0);
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	return d;
}

static void setup(void)
{
	state = tu_mkdtemp();
}

static void teardown(void)
{
	cae__rm_rf(state);
	free(state);
}

START_TEST(help_everywhere)
{
	out o = cae("--help", NULL);
	ck_assert_int_eq(o.status, 0);
	const char *subs[] = {"env",   "prepare", "exec",   "cleanup",	"gc",	   "run",
			      "tools", "prompt",  "doctor", "snapshot", "restore", "fork"};
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		ck_assert_msg(strstr(o.out, subs[i]), "--help does not list %s", subs[i]);
		out h = cae(subs[i], "--help", NULL);
		ck_assert_msg(h.status == 0, "%s --help exited %d", subs[i], h.status);
		char want[64];
		snprintf(want, sizeof(want), "usage: cae %s", subs[i]);
		ck_assert_msg(strstr(h.out, want), "%s --help: %s", subs[i], h.out);
		out_clear(&h);
	}
	out_clear(&o);
	o = cae("frobnicate", NULL);
	ck_assert_int_eq(o.status, 2);
	out_clear(&o);
	o = cae("exec", "--no-such-flag", NULL);
	ck_assert_int_eq(o.status, 2);
	out_clear(&o);
}
END_TEST

START_TEST(prepare_exec_cleanup_across_processes)
{
	_cleanup_free_ char *repo = make_repo();
	out o = cae("prepare", "--repo", repo, "--uuid", "cli-1", "--env", "python", NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_assert_ptr_nonnull(o.json);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "status")), "ready");
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "environment_name")), "python");
	out_clear(&o);
	/* a shell string through command-executor_execute_command */
	o = cae("exec", "--uuid", "cli-1", "--", "cat readme.txt; echo oops >&2; exit 3", NULL);
	ck_assert_int_eq(o.status, 3);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stdout")), "hello\n");
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stderr")), "oops\n");
	out_clear(&o);
	/* argv through exec_command, direct mode */
	o = cae("exec", "--uuid", "cli-1", "--direct", "--", "printf", "%s|", "a b", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stdout")), "a b|");
	out_clear(&o);
	/* refused by the policy: 126, naming the command */
	o = cae("exec", "--uuid", "cli-1", "--", "sudo id", NULL);
	ck_assert_int_eq(o.status, 126);
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o.json, "stderr")), "sudo"));
	out_clear(&o);
	/* timeout: 124 */
	o = cae("exec", "--uuid", "cli-1", "--timeout", "1", "--", "sleep 30", NULL);
	ck_assert_int_eq(o.status, 124);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stderr")),
			 "Command timeout after 1 seconds");
	out_clear(&o);
	/* the only environment is the default for exec */
	o = cae("exec", "--", "echo default", NULL);
	ck_assert_int_eq(o.status, 0);
	out_clear(&o);
	/* snapshot, restore and fork from the command line, each its own process */
	o = cae("snapshot", "cli-1", "--name", "base", NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "name")), "base");
	out_clear(&o);
	o = cae("exec", "--uuid", "cli-1", "--", "echo x > added && rm readme.txt", NULL);
	ck_assert_int_eq(o.status, 0);
	out_clear(&o);
	o = cae("fork", "--from", "cli-1", "--snapshot", "base", "--uuid", "cli-1f", NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(o.json, "forked_from"), "task_uuid")),
	    "cli-1");
	out_clear(&o);
	o = cae("restore", "cli-1", "base", NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	out_clear(&o);
	o = cae("exec", "--uuid", "cli-1", "--", "ls", NULL);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stdout")), "readme.txt\n");
	out_clear(&o);
	o = cae("exec", "--uuid", "cli-1f", "--", "cat readme.txt", NULL);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stdout")), "hello\n");
	out_clear(&o);
	o = cae("snapshot", "list", NULL);
	ck_assert_uint_eq(json_array_size(o.json), 1);
	out_clear(&o);
	o = cae("restore", "cli-1", "no-such-snapshot", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert_msg(strstr(o.err, "cae: restore: NOT_FOUND: "), "%s", o.err);
	out_clear(&o);
	o = cae("cleanup", "cli-1f", NULL);
	ck_assert_int_eq(o.status, 0);
	out_clear(&o);
	/* another process lists it */
	o = cae("env", "list", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_uint_eq(json_array_size(o.json), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(o.json, 0), "task_uuid")),
			 "cli-1");
	out_clear(&o);
	o = cae("cleanup", "cli-1", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert(json_is_true(json_object_get(o.json, "removed")));
	out_clear(&o);
	/* again: nothing to remove, no error, and it says so */
	o = cae("cleanup", "cli-1", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert(json_is_false(json_object_get(o.json, "removed")));
	out_clear(&o);
	o = cae("env", "list", NULL);
	ck_assert_uint_eq(json_array_size(o.json), 0);
	out_clear(&o);
	o = cae("exec", "--uuid", "cli-1", "--", "true", NULL);
	ck_assert_int_ne(o.status, 0);
	ck_assert_msg(strstr(o.err, "cae: NOT_FOUND: no environment for task cli-1"), "%s", o.err);
	out_clear(&o);
	/* errors a user can fix say their class, never INTERNAL (issue 23): a repository or a
	 * branch that is not there, a remote that does not answer (a closed loopback port) */
	char missing[4096];
	snprintf(missing, sizeof(missing), "%s/no-such-repo", repo);
	o = cae("prepare", "--repo", missing, "--uuid", "cli-2", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert_msg(strstr(o.err, "cae: prepare: NOT_FOUND: clone: repository not found"), "%s",
		      o.err);
	out_clear(&o);
	o = cae("prepare", "--repo", repo, "--uuid", "cli-2", "--kind", "pull_request", "--branch",
		"no-such-branch", "--target-branch", "main", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert_msg(strstr(o.err, "cae: prepare: NOT_FOUND: ") && strstr(o.err, "no-such-branch"),
		      "%s", o.err);
	out_clear(&o);
	o = cae("prepare", "--repo", "http://127.0.0.1:1/nothing.git", "--uuid", "cli-2", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert_msg(strstr(o.err, "cae: prepare: UNAVAILABLE: "), "%s", o.err);
	ck_assert_ptr_null(strstr(o.err, "INTERNAL"));
	out_clear(&o);
}
END_TEST

/* cae edit: the text editor tool from the command line, its arguments as flags or
 * JSON, the tool's result; a refusal is exit 1 with the editor's message, a bad call exit 2. */
START_TEST(edit_commands)
{
	_cleanup_free_ char *repo = make_repo();
	out o = cae("prepare", "--repo", repo, "--uuid", "cli-edit", NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	out_clear(&o);
	o = cae("edit", "--help", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_ptr_nonnull(strstr(o.out, "usage: cae edit"));
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "create", "notes.txt", "--file-text", "one\nthree\n",
		NULL);
	ck_assert_msg(o.status == 0, "%s %s", o.out, o.err);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "command")), "create");
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "insert", "--path", "notes.txt", "--insert-line", "1",
		"--new-str", "two", NULL);
	ck_assert_msg(o.status == 0, "%s %s", o.out, o.err);
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "str_replace", "notes.txt", "--old-str", "three",
		"--new-str", "-3-", NULL);
	ck_assert_msg(o.status == 0, "%s %s", o.out, o.err);
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o.json, "output")), "-3-"));
	out_clear(&o);
	/* the file as a command sees it */
	o = cae("exec", "--uuid", "cli-edit", "--", "cat notes.txt", NULL);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stdout")), "one\ntwo\n-3-\n");
	out_clear(&o);
	/* view with a range, as JSON arguments, and as the text the model reads */
	o = cae("edit", "--uuid", "cli-edit", "--json",
		"{\"command\": \"view\", \"path\": \"notes.txt\", \"view_range\": [2, 3]}",
		"--format", "text", NULL);
	ck_assert_msg(o.status == 0, "%s %s", o.out, o.err);
	ck_assert_msg(strstr(o.out, "     2\ttwo\n     3\t-3-") && !strstr(o.out, "one"), "%s",
		      o.out);
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "view", "notes.txt", "--view-range", "1,1", NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o.json, "output")), "one"));
	ck_assert_ptr_null(strstr(json_string_value(json_object_get(o.json, "output")), "two"));
	out_clear(&o);
	/* the undo history is the process's: an earlier invocation's edit is not undone ... */
	o = cae("edit", "--uuid", "cli-edit", "undo_edit", "notes.txt", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert_ptr_nonnull(
	    strstr(json_string_value(json_object_get(o.json, "output")), "No edit history"));
	out_clear(&o);
	/* ... and an array of calls runs in one session, where undo_edit works */
	o = cae("edit", "--uuid", "cli-edit", "--json",
		"[{\"command\": \"str_replace\", \"path\": \"notes.txt\", \"old_str\": "
		"\"-3-\", \"new_str\": \"three\"}, {\"command\": \"str_replace\", \"path\": "
		"\"notes.txt\", \"old_str\": \"two\", \"new_str\": \"2\"}, {\"command\": "
		"\"undo_edit\", \"path\": \"notes.txt\"}]",
		NULL);
	ck_assert_msg(o.status == 0, "%s %s", o.out, o.err);
	ck_assert_uint_eq(json_array_size(o.json), 3);
	out_clear(&o);
	o = cae("exec", "--uuid", "cli-edit", "--", "cat notes.txt", NULL);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "stdout")), "one\ntwo\nthree\n");
	out_clear(&o);
	/* the editor's refusals: its message, exit 1 */
	o = cae("edit", "--uuid", "cli-edit", "str_replace", "notes.txt", "--old-str", "absent",
		"--new-str", "x", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(json_is_true(json_object_get(o.json, "is_error")));
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "view", "../../etc/passwd", NULL);
	ck_assert_int_eq(o.status, 1);
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "create", ".git/hooks/pre-commit", "--file-text",
		"#!/bin/sh\n", NULL);
	ck_assert_int_eq(o.status, 1);
	out_clear(&o);
	/* usage errors: exit 2 */
	o = cae("edit", "--uuid", "cli-edit", "frob", "notes.txt", NULL);
	ck_assert_int_eq(o.status, 2);
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "view", "--insert-line", "x", NULL);
	ck_assert_int_eq(o.status, 2);
	out_clear(&o);
	o = cae("edit", "--uuid", "cli-edit", "--json", "[1]", NULL);
	ck_assert_int_eq(o.status, 2);
	out_clear(&o);
	o = cae("cleanup", "cli-edit", NULL);
	ck_assert_int_eq(o.status, 0);
	out_clear(&o);
}
END_TEST

START_TEST(run_one_shot)
{
	_cleanup_free_ char *repo = make_repo();
	out o = cae("run", "--repo", repo, "--", "wc -l < readme.txt; exit 7", NULL);
	ck_assert_int_eq(o.status, 7);
	ck_assert_ptr_nonnull(o.json);
	json_t *res = json_object_get(o.json, "result");
	ck_assert_str_eq(json_string_value(json_object_get(res, "stdout")), "1\n");
	ck_assert(json_is_true(json_object_get(json_object_get(o.json, "cleanup"), "removed")));
	/* logs are JSON lines on stderr, never on stdout */
	ck_assert_ptr_nonnull(strstr(o.err, "\"event\":\"environment.fallback\""));
	out_clear(&o);
	o = cae("env", "list", NULL);
	ck_assert_uint_eq(json_array_size(o.json), 0);
	out_clear(&o);
	/* a repository that cannot be cloned: failure, nothing left */
	o = cae("run", "--repo", "/nonexistent/repo", "--", "true", NULL);
	ck_assert_int_ne(o.status, 0);
	ck_assert_ptr_nonnull(strstr(o.err, "prepare"));
	out_clear(&o);
	o = cae("env", "list", NULL);
	ck_assert_uint_eq(json_array_size(o.json), 0);
	out_clear(&o);
}
END_TEST

START_TEST(gc_removes_old)
{
	_cleanup_free_ char *repo = make_repo();
	out o = cae("prepare", "--repo", repo, "--uuid", "gc-1", NULL);
	ck_assert_int_eq(o.status, 0);
	out_clear(&o);
	o = cae("gc", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_int_eq(json_integer_value(json_object_get(o.json, "removed")), 0);
	out_clear(&o);
	o = cae("gc", "--older-than-hours", "0", NULL);
	ck_assert_int_eq(json_integer_value(json_object_get(o.json, "removed")), 1);
	out_clear(&o);
}
END_TEST

START_TEST(tools_and_prompt)
{
	out o = cae("tools", "--format", "openai", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert(json_is_array(o.json));
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(o.json, 0), "type")),
			 "function");
	out_clear(&o);
	o = cae("tools", "--format", "functions", "--split-editor", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_ptr_nonnull(strstr(o.out, "text_editor_str_replace"));
	ck_assert_ptr_nonnull(strstr(o.out, "exec_command"));
	out_clear(&o);
	o = cae("prompt", "command-executor", NULL);
	ck_assert_int_eq(o.status, 0);
	ck_assert_ptr_nonnull(strstr(o.out, "## Command Execution Feature"));
	ck_assert_ptr_nonnull(strstr(o.out, "Build/Package Management: npm, yarn, pnpm"));
	ck_assert_ptr_null(strstr(o.out, "{allowed_commands_list}"));
	out_clear(&o);
	setenv("COMMAND_EXECUTOR_ENABLED", "false", 1);
	o = cae("tools", "--format", "openai", NULL);
	ck_assert_ptr_null(strstr(o.out, "exec"));
	out_clear(&o);
	o = cae("prompt", "command-executor", NULL);
	ck_assert_str_eq(o.out, "");
	out_clear(&o);
	unsetenv("COMMAND_EXECUTOR_ENABLED");
}
END_TEST

/* `cae mcp` over real pipes: the protocol on stdout only, and --editor-compat giving the npm
 * mcp-server-text-editor result shape. The client closes its end once it has its answers
 * (end of input cancels calls still running). */
/* Starts `cae mcp --workspace ws [flag]` over the test's state directory, its stderr
 * dropped: in[1] writes its input, outp[0] reads its output (the other ends are closed). */
static pid_t start_mcp(const char *ws, const char *flag, int in[2], int outp[2])
{
	setenv("CAE_STATE_DIR", state, 1);
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(outp, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(outp[1], 1);
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		execl(cae_path, cae_path, "mcp", "--workspace", ws, flag, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(outp[1]);
	return pid;
}

/* Appends to b (grown with realloc) n bytes of c. */
static void put_fill(char **b, size_t *len, size_t *cap, char c, size_t n)
{
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*b = realloc(*b, *cap);
		ck_assert_ptr_nonnull(*b);
	}
	memset(*b + *len, c, n);
	*len += n;
	(*b)[*len] = '\0';
}

static void put_str(char **b, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);
	put_fill(b, len, cap, ' ', n);
	memcpy(*b + *len - n, s, n);
}

/* cae mcp serves requests as large as the tools document (a 10 MiB file_text, a patch of
 * tens of MiB) and answers a line over its limit with an error carrying the request's id,
 * wherever the id stands in the line; then it goes on serving. */
START_TEST(mcp_large_requests)
{
	_cleanup_free_ char *ws = tu_mkdtemp();
	int in[2], outp[2];
	pid_t pid = start_mcp(ws, NULL, in, outp);
	/* The writer keeps the server's input open until every answer came (done closed):
	 * the end of input would cancel calls still running. */
	int done[2];
	ck_assert_int_eq(pipe2(done, O_CLOEXEC), 0);
	pid_t writer = fork();
	ck_assert_int_ge(writer, 0);
	if (writer == 0) {
		close(outp[0]);
		close(done[1]);
		char *b = NULL;
		size_t len = 0, cap = 0;
		put_str(&b, &len, &cap,
			"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{"
			"\"name\":\"t\",\"version\":\"1\"}}}\n"
			"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
		/* the editor's maximum file: 10 MiB */
		put_str(
		    &b, &len, &cap,
		    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
		    "\"text_editor\",\"arguments\":{\"command\":\"create\",\"path\":\"big.txt\","
		    "\"file_text\":\"");
		put_fill(&b, &len, &cap, 'a', ((size_t)10 << 20) - 1);
		put_str(&b, &len, &cap, "\\n\"}}}\n");
		/* a patch of three 9 MiB files (27 MiB), as an array of commands */
		put_str(
		    &b, &len, &cap,
		    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
		    "\"apply_patch\",\"arguments\":{\"patch\":[");
		for (int i = 0; i < 3; i++) {
			char head[200];
			snprintf(head, sizeof(head),
				 "%s{\"type\":\"file_edit\",\"action\":\"create\",\"target\":"
				 "\"p%d.txt\",\"content\":\"",
				 i ? "," : "", i);
			put_str(&b, &len, &cap, head);
			put_fill(&b, &len, &cap, 'b', (size_t)9 << 20);
			put_str(&b, &len, &cap, "\"}");
		}
		put_str(&b, &len, &cap, "]}}}\n");
		/* past the 96 MiB limit, the id at the end */
		put_str(&b, &len, &cap,
			"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":"
			"\"text_editor\",\"arguments\":{\"command\":\"create\",\"path\":\"no.txt\","
			"\"file_text\":\"");
		put_fill(&b, &len, &cap, 'c', (size_t)97 << 20);
		put_str(&b, &len, &cap, "\"}},\"id\":\"too-big\"}\n");
		put_str(&b, &len, &cap, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\n");
		for (size_t off = 0; off < len;) {
			ssize_t k = write(in[1], b + off, len - off);
			if (k <= 0)
				_exit(1);
			off += (size_t)k;
		}
		char c;
		while (read(done[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(in[1]);
	close(done[0]);
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int answers = 0;
	for (;;) {
		put_fill(&buf, &len, &cap, 0, 65536);
		len -= 65536;
		ssize_t k = read(outp[0], buf + len, 65536);
		ck_assert_int_ge(k, 0);
		if (k == 0)
			break;
		for (ssize_t i = 0; i < k; i++)
			answers += buf[len + (size_t)i] == '\n';
		len += (size_t)k;
		if (answers >= 5 && done[1] >= 0) { /* initialize's and the four */
			close(done[1]);
			done[1] = -1;
		}
	}
	if (done[1] >= 0)
		close(done[1]);
	buf[len] = '\0';
	close(outp[0]);
	int st;
	ck_assert_int_eq(waitpid(writer, &st, 0), writer);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	bool seen[4] = {false};
	for (char *line = buf, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
		*nl = '\0';
		json_t *m = json_loads(line, 0, NULL);
		ck_assert_msg(m, "%.200s", line);
		json_t *id = json_object_get(m, "id");
		json_t *res = json_object_get(m, "result");
		if (json_is_integer(id) && json_integer_value(id) == 2) {
			ck_assert_msg(res && !json_is_true(json_object_get(res, "isError")),
				      "%.300s", line);
			seen[0] = true;
		} else if (json_is_integer(id) && json_integer_value(id) == 3) {
			json_t *sc = json_object_get(res, "structuredContent");
			ck_assert_msg(json_is_true(json_object_get(sc, "success")), "%.300s", line);
			seen[1] = true;
		} else if (json_is_string(id) && strcmp(json_string_value(id), "too-big") == 0) {
			json_t *e = json_object_get(m, "error");
			ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), -32600);
			seen[2] = true;
		} else if (json_is_integer(id) && json_integer_value(id) == 5) {
			seen[3] = true;
		}
		json_decref(m);
	}
	ck_assert_msg(seen[0] && seen[1] && seen[2] && seen[3], "%d %d %d %d", seen[0], seen[1],
		      seen[2], seen[3]);
	struct stat sb;
	char path[4200];
	snprintf(path, sizeof(path), "%s/big.txt", ws);
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size, 10 << 20);
	snprintf(path, sizeof(path), "%s/p2.txt", ws);
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size, 9 << 20);
	snprintf(path, sizeof(path), "%s/no.txt", ws);
	ck_assert_int_ne(stat(path, &sb), 0);
	free(buf);
	cae__rm_rf(ws);
}
END_TEST

START_TEST(mcp_editor_compat)
{
	_cleanup_free_ char *ws = tu_mkdtemp();
	tu_write(ws, "a.txt", "one\ntwo\n");
	const char *input =
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
	    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":"
	    "\"t\",\"version\":\"1\"}}}\n"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
	    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
	    "\"text_editor\",\"arguments\":{\"command\":\"view\",\"path\":\"a.txt\","
	    "\"description\":\"look\"}}}\n";
	int in[2], outp[2];
	pid_t pid = start_mcp(ws, "--editor-compat", in, outp);
	ck_assert_int_eq(write(in[1], input, strlen(input)), (ssize_t)strlen(input));
	/* two answers, one line each, nothing else on stdout */
	char buf[65536];
	size_t len = 0;
	int lines = 0;
	while (lines < 2) {
		ck_assert_uint_lt(len, sizeof(buf) - 1);
		ssize_t k = read(outp[0], buf + len, sizeof(buf) - 1 - len);
		ck_assert_int_gt(k, 0);
		for (ssize_t i = 0; i < k; i++)
			lines += buf[len + (size_t)i] == '\n';
		len += (size_t)k;
	}
	close(in[1]); /* end of input: the server exits */
	ssize_t k;
	while ((k = read(outp[0], buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)k;
	buf[len] = '\0';
	close(outp[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char *nl = strchr(buf, '\n');
	ck_assert_ptr_nonnull(nl);
	json_t *second = json_loads(nl + 1, JSON_DISABLE_EOF_CHECK, NULL);
	ck_assert_ptr_nonnull(second);
	ck_assert_str_eq(strchr(nl + 1, '\n'), "\n");
	ck_assert_int_eq(json_integer_value(json_object_get(second, "id")), 2);
	json_t *content = json_object_get(json_object_get(second, "result"), "content");
	const char *text = json_string_value(json_object_get(json_array_get(content, 0), "text"));
	json_t *compat = json_loads(text, 0, NULL);
	ck_assert_ptr_nonnull(compat);
	ck_assert(json_is_true(json_object_get(compat, "success")));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(compat, "content")), "two"));
	json_decref(compat);
	json_decref(second);
	cae__rm_rf(ws);
}
END_TEST

/* Runs `cae mcp` (local backend, the test's state directory, config file config or none),
 * writes input, reads until `answers` lines came back, then closes its input and waits for
 * it to exit; returns the exit status. */
static int mcp_run(const char *config, const char *input, int answers)
{
	setenv("CAE_STATE_DIR", state, 1);
	setenv("EXECUTOR_BACKEND", "local", 1);
	int in[2], outp[2];
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(outp, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(outp[1], 1);
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		if (config)
			setenv("CAE_CONFIG", config, 1);
		execl(cae_path, cae_path, "mcp", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(outp[1]);
	ck_assert_int_eq(write(in[1], input, strlen(input)), (ssize_t)strlen(input));
	char buf[65536];
	size_t len = 0;
	int lines = 0;
	while (lines < answers) {
		ck_assert_uint_lt(len, sizeof(buf) - 1);
		ssize_t k = read(outp[0], buf + len, sizeof(buf) - 1 - len);
		ck_assert_int_gt(k, 0);
		for (ssize_t i = 0; i < k; i++)
			lines += buf[len + (size_t)i] == '\n';
		len += (size_t)k;
	}
	buf[len] = '\0';
	ck_assert_msg(answers == 0 || strstr(buf, "\"isError\":true") == NULL, "%s", buf);
	close(in[1]);
	while (read(outp[0], buf, sizeof(buf)) > 0)
		;
	close(outp[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool listed(const char *uuid)
{
	out o = cae("env", "list", NULL);
	ck_assert_int_eq(o.status, 0);
	bool found = false;
	size_t i;
	json_t *e;
	json_array_foreach(o.json, i, e)
	{
		found |= strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0;
	}
	out_clear(&o);
	return found;
}

static void prepare_cli(const char *repo, const char *uuid)
{
	out o = cae("prepare", "--repo", repo, "--uuid", uuid, NULL);
	ck_assert_msg(o.status == 0, "%s", o.err);
	out_clear(&o);
}

/* `cae mcp` collects stale environments when it starts, with no client request at all: an
 * old one goes, a fresh one (another process's, in use) stays. */
START_TEST(mcp_collects_at_start)
{
	_cleanup_free_ char *repo = make_repo();
	prepare_cli(repo, "old-1");
	prepare_cli(repo, "fresh-1");
	tu_sh("cd %s/local/old-1 && sed -i 's/\"created_at\": \"[^\"]*\"/\"created_at\": "
	      "\"2020-01-01T00:00:00.000Z\"/' meta.json",
	      state);
	ck_assert(listed("old-1"));
	/* interval_hours 0: collection is left to `cae gc` */
	_cleanup_free_ char *dir = tu_mkdtemp();
	tu_write(dir, "off.yaml", "command_executor:\n  cleanup:\n    interval_hours: 0\n");
	char config[4200];
	snprintf(config, sizeof(config), "%s/off.yaml", dir);
	ck_assert_int_eq(mcp_run(config, "", 0), 0);
	ck_assert(listed("old-1"));
	ck_assert_int_eq(mcp_run(NULL, "", 0), 0);
	ck_assert(!listed("old-1"));
	cae__rm_rf(dir);
	ck_assert(listed("fresh-1"));
}
END_TEST

/* command_executor.cleanup.on_session_end (default true): what the server prepared is
 * removed when it ends; what another process prepared stays; false keeps it. */
#define PREPARE_INPUT                                                                              \
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"                     \
	"\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":"         \
	"\"t\",\"version\":\"1\"}}}\n"                                                             \
	"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"                         \
	"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"            \
	"\"environment_prepare\",\"arguments\":{\"task\":{\"uuid\":\"%s\",\"repo\":\"%s\"}}}}\n"

START_TEST(mcp_session_end_cleanup)
{
	_cleanup_free_ char *repo = make_repo();
	prepare_cli(repo, "other-1");
	_cleanup_free_ char *dir = tu_mkdtemp();
	char yaml[4096], config[4200], input[8192];
	snprintf(yaml, sizeof(yaml), "command_executor:\n  local_repo_roots: [\"%s\"]\n", repo);
	tu_write(dir, "on.yaml", yaml);
	snprintf(yaml + strlen(yaml), sizeof(yaml) - strlen(yaml),
		 "  cleanup:\n    on_session_end: false\n");
	tu_write(dir, "off.yaml", yaml);
	snprintf(input, sizeof(input), PREPARE_INPUT, "mine-1", repo);
	snprintf(config, sizeof(config), "%s/on.yaml", dir);
	ck_assert_int_eq(mcp_run(config, input, 2), 0);
	ck_assert(!listed("mine-1"));
	ck_assert(listed("other-1"));
	snprintf(input, sizeof(input), PREPARE_INPUT, "kept-1", repo);
	snprintf(config, sizeof(config), "%s/off.yaml", dir);
	ck_assert_int_eq(mcp_run(config, input, 2), 0);
	ck_assert(listed("kept-1"));
	ck_assert(listed("other-1"));
	cae__rm_rf(dir);
}
END_TEST

/* cae doctor: the report's shape is stable (every backend {ok, checks}, every check exactly
 * {name, ok, detail, fix, required}, fix null exactly when ok), and a check that must fail
 * does: an engine endpoint that answers nothing makes docker not ok with what to do, and the
 * exit status follows the default backend only. */
static void doctor_shape(json_t *j)
{
	ck_assert_msg(json_is_object(j), "not JSON");
	ck_assert(json_is_string(json_object_get(j, "default_backend")));
	ck_assert(json_is_string(json_object_get(j, "configured_backend")));
	ck_assert(json_is_boolean(json_object_get(j, "ok")));
	json_t *backends = json_object_get(j, "backends");
	ck_assert_int_eq(json_object_size(backends), 3);
	const char *names[] = {"local", "docker", "kubernetes"};
	for (size_t i = 0; i < 3; i++) {
		json_t *b = json_object_get(backends, names[i]);
		ck_assert_msg(b, "no backend %s", names[i]);
		ck_assert_int_eq(json_object_size(b), 2);
		ck_assert(json_is_boolean(json_object_get(b, "ok")));
		json_t *checks = json_object_get(b, "checks");
		ck_assert(json_is_array(checks) && json_array_size(checks) > 0);
		bool all_required_ok = true;
		size_t k;
		json_t *c;
		json_array_foreach(checks, k, c)
		{
			ck_assert_int_eq(json_object_size(c), 5);
			ck_assert(json_is_string(json_object_get(c, "name")));
			ck_assert(json_is_string(json_object_get(c, "detail")));
			ck_assert(json_is_boolean(json_object_get(c, "required")));
			bool ok = json_is_true(json_object_get(c, "ok"));
			ck_assert(json_is_boolean(json_object_get(c, "ok")));
			json_t *fix = json_object_get(c, "fix");
			ck_assert_msg(ok ? json_is_null(fix) : json_string_length(fix) > 0,
				      "%s/%s: fix %s", names[i],
				      json_string_value(json_object_get(c, "name")),
				      ok ? "given although ok" : "missing");
			if (!ok && json_is_true(json_object_get(c, "required")))
				all_required_ok = false;
		}
		ck_assert_int_eq(json_is_true(json_object_get(b, "ok")), all_required_ok);
	}
}

static json_t *doctor_check(json_t *j, const char *backend, const char *name)
{
	json_t *checks =
	    json_object_get(json_object_get(json_object_get(j, "backends"), backend), "checks");
	size_t i;
	json_t *c;
	json_array_foreach(checks, i, c)
	{
		if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
			return c;
	}
	ck_abort_msg("no check %s of %s", name, backend);
	return NULL;
}

START_TEST(doctor_reports)
{
	_cleanup_free_ char *dir = tu_mkdtemp();
	tu_write(dir, "c.yaml",
		 "command_executor:\n  docker_host: unix:///nonexistent/cae-doctor.sock\n"
		 "  kubernetes:\n    kubeconfig: /nonexistent/cae-doctor-kubeconfig\n");
	char config[4200];
	snprintf(config, sizeof(config), "%s/c.yaml", dir);
	/* the default backend here is local (EXECUTOR_BACKEND), which works on this host */
	out o = cae("doctor", "--config", config, "--format", "json", NULL);
	ck_assert_msg(o.status == 0, "status %d: %s%s", o.status, o.out, o.err);
	doctor_shape(o.json);
	ck_assert_str_eq(json_string_value(json_object_get(o.json, "default_backend")), "local");
	json_t *local = json_object_get(json_object_get(o.json, "backends"), "local");
	ck_assert(json_is_true(json_object_get(local, "ok")));
	const char *local_checks[] = {"state directory", "bubblewrap", "cae-helper",
				      "user namespaces", "sandbox",    "seccomp",
				      "cgroups",	 "disk bound"};
	for (size_t i = 0; i < sizeof(local_checks) / sizeof(local_checks[0]); i++)
		(void)doctor_check(o.json, "local", local_checks[i]);
	ck_assert(json_is_true(json_object_get(doctor_check(o.json, "local", "sandbox"), "ok")));
	ck_assert(json_is_true(json_object_get(doctor_check(o.json, "local", "seccomp"), "ok")));
	json_t *docker = json_object_get(json_object_get(o.json, "backends"), "docker");
	ck_assert(json_is_false(json_object_get(docker, "ok")));
	json_t *engine = doctor_check(o.json, "docker", "engine");
	ck_assert(json_is_false(json_object_get(engine, "ok")));
	ck_assert(json_is_true(json_object_get(engine, "required")));
	ck_assert(strstr(json_string_value(json_object_get(engine, "detail")),
			 "/nonexistent/cae-doctor.sock"));
	ck_assert(strstr(json_string_value(json_object_get(engine, "fix")), "docker_host"));
	json_t *kc = doctor_check(o.json, "kubernetes", "kubeconfig");
	ck_assert(json_is_false(json_object_get(kc, "ok")));
	ck_assert(strstr(json_string_value(json_object_get(kc, "fix")), "kubeconfig"));
	out_clear(&o);
	/* judged on docker, the same host fails, and the text says what to do */
	o = cae("doctor", "--config", config, "--backend", "docker", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert_msg(strstr(o.out, "default backend: docker — does NOT work") &&
			  strstr(o.out, "docker: does not work") &&
			  strstr(o.out, "fix: start the Docker engine"),
		      "%s", o.out);
	out_clear(&o);
	o = cae("doctor", "--format", "yaml", NULL);
	ck_assert_int_eq(o.status, 2);
	out_clear(&o);
	cae__rm_rf(dir);
}
END_TEST

/* With the engine up: docker is ok, the images it has are present, and an environment whose
 * image it lacks is reported with the command that builds it; when that is the default
 * environment, docker does not work. */
START_TEST(doctor_docker)
{
	_cleanup_free_ char *dir = tu_mkdtemp();
	const char *envs = "command_executor:\n  environments:\n"
			   "    python: coding-agent-executor-python:latest\n"
			   "    doctortest: coding-agent-executor-doctortest-missing:latest\n"
			   "    doctorown: coding-agent-executor-doctorown:latest\n";
	char yaml[1024];
	snprintf(yaml, sizeof(yaml), "%s", envs);
	tu_write(dir, "c.yaml", yaml);
	snprintf(yaml, sizeof(yaml), "%s  default_environment: doctorown\n", envs);
	tu_write(dir, "own.yaml", yaml);
	char config[4200];
	snprintf(config, sizeof(config), "%s/c.yaml", dir);
	out o = cae("doctor", "--config", config, "--backend", "docker", "--format", "json", NULL);
	ck_assert_msg(o.status == 0, "status %d: %s%s", o.status, o.out, o.err);
	doctor_shape(o.json);
	ck_assert(json_is_true(json_object_get(doctor_check(o.json, "docker", "engine"), "ok")));
	ck_assert(
	    json_is_true(json_object_get(doctor_check(o.json, "docker", "engine version"), "ok")));
	(void)doctor_check(o.json, "docker", "storage driver");
	ck_assert(
	    json_is_true(json_object_get(doctor_check(o.json, "docker", "image python"), "ok")));
	json_t *own = doctor_check(o.json, "docker", "image doctorown");
	ck_assert(json_is_false(json_object_get(own, "ok")));
	ck_assert(json_is_false(json_object_get(own, "required")));
	ck_assert_str_eq(json_string_value(json_object_get(own, "fix")),
			 "cae images build doctorown");
	json_t *other = doctor_check(o.json, "docker", "image doctortest");
	ck_assert(json_is_false(json_object_get(other, "ok")));
	ck_assert(strstr(json_string_value(json_object_get(other, "fix")),
			 "docker pull coding-agent-executor-doctortest-missing:latest"));
	out_clear(&o);
	snprintf(config, sizeof(config), "%s/own.yaml", dir);
	o = cae("doctor", "--config", config, "--backend", "docker", "--format", "json", NULL);
	ck_assert_int_eq(o.status, 1);
	ck_assert(json_is_true(
	    json_object_get(doctor_check(o.json, "docker", "image doctorown"), "required")));
	out_clear(&o);
	cae__rm_rf(dir);
}
END_TEST

/* The cluster of CAE_TEST_K8S (its KUBECONFIG): reachable, the namespace's pods visible, its
 * node has the python image; a namespace that does not exist is reported with the command
 * that makes it. */
START_TEST(doctor_kubernetes)
{
	_cleanup_free_ char *dir = tu_mkdtemp();
	tu_write(dir, "c.yaml",
		 "command_executor:\n  environments:\n"
		 "    python: coding-agent-executor-python:latest\n"
		 "    doctorown: coding-agent-executor-doctorown:latest\n"
		 "  kubernetes:\n    image_pull_policy: Never\n");
	tu_write(dir, "ns.yaml",
		 "command_executor:\n  kubernetes:\n    namespace: cae-doctor-no-such-namespace\n");
	char config[4200];
	snprintf(config, sizeof(config), "%s/c.yaml", dir);
	out o =
	    cae("doctor", "--config", config, "--backend", "kubernetes", "--format", "json", NULL);
	ck_assert_msg(o.status == 0, "status %d: %s%s", o.status, o.out, o.err);
	doctor_shape(o.json);
	const char *ok_checks[] = {"kubeconfig", "cluster", "namespace", "nodes", "image python"};
	for (size_t i = 0; i < 5; i++)
		ck_assert_msg(json_is_true(json_object_get(
				  doctor_check(o.json, "kubernetes", ok_checks[i]), "ok")),
			      "%s", ok_checks[i]);
	json_t *own = doctor_check(o.json, "kubernetes", "image doctorown");
	ck_assert(json_is_false(json_object_get(own, "ok")));
	ck_assert(
	    strstr(json_string_value(json_object_get(own, "fix")), "cae images build doctorown"));
	ck_assert(strstr(json_string_value(json_object_get(own, "detail")), "Never"));
	out_clear(&o);
	snprintf(config, sizeof(config), "%s/ns.yaml", dir);
	o = cae("doctor", "--config", config, "--backend", "kubernetes", "--format", "json", NULL);
	ck_assert_int_eq(o.status, 1);
	json_t *ns = doctor_check(o.json, "kubernetes", "namespace");
	ck_assert(json_is_false(json_object_get(ns, "ok")));
	ck_assert(strstr(json_string_value(json_object_get(ns, "fix")),
			 "kubectl create namespace cae-doctor-no-such-namespace"));
	out_clear(&o);
	cae__rm_rf(dir);
}
END_TEST

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test-cli PATH-TO-CAE\n");
		return 2;
	}
	cae_path = argv[1];
	Suite *s = suite_create("cli");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 180);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, help_everywhere);
	tcase_add_test(tc, prepare_exec_cleanup_across_processes);
	tcase_add_test(tc, edit_commands);
	tcase_add_test(tc, run_one_shot);
	tcase_add_test(tc, gc_removes_old);
	tcase_add_test(tc, tools_and_prompt);
	tcase_add_test(tc, mcp_editor_compat);
	tcase_add_test(tc, mcp_large_requests);
	tcase_add_test(tc, mcp_collects_at_start);
	tcase_add_test(tc, mcp_session_end_cleanup);
	tcase_add_test(tc, doctor_reports);
	if (getenv("CAE_TEST_DOCKER"))
		tcase_add_test(tc, doctor_docker);
	if (getenv("CAE_TEST_K8S"))
		tcase_add_test(tc, doctor_kubernetes);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
