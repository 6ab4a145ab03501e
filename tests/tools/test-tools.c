/* The agent tools through the session on the local backend: exec_command (its acceptance
 * lines for Linux), command-executor_execute_command, the tool table, secrets masking with and
 * without a logger, tool definitions (the exec_command strings, byte for byte), process
 * sessions. */
#include "base/macro.h"
#include "cae/patch.h"
#include "cae/session.h"
#include "cae/tools.h"
#include "testutil.h"
#include "tools/tools-internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

static char *state, *ws;

static cae_session *open_session_log(const char *extra_yaml, cae_log *log);

static cae_session *open_session(const char *extra_yaml)
{
	return open_session_log(extra_yaml, NULL);
}

/* A session over a fresh state directory and workspace, with log (borrowed, may be NULL). */
static cae_session *open_session_log(const char *extra_yaml, cae_log *log)
{
	state = tu_mkdtemp();
	ws = tu_mkdtemp();
	char yaml[4096];
	snprintf(yaml, sizeof(yaml), "command_executor:\n  backend: local\n  state_dir: %s\n%s",
		 state, extra_yaml ? extra_yaml : "");
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg, yaml, strlen(yaml), "test.yaml", envp, &err) ==
			  0,
		      "%s", err.message);
	cae_session *s;
	ck_assert_msg(cae_session_new(cfg, log, &s, &err) == 0, "%s", err.message);
	ck_assert_msg(cae_session_use_workspace(s, ws, &err) == 0, "%s", err.message);
	return s;
}

static void close_session(cae_session *s)
{
	cae_session_free(s);
	cae__rm_rf(state);
	cae__rm_rf(ws);
	free(state);
	free(ws);
}

/* Calls a tool with arguments given as JSON text; returns the structured result. */
static json_t *call(cae_session *s, const char *tool, const char *args_json, bool *is_error)
{
	json_error_t je;
	json_t *args = json_loads(args_json, 0, &je);
	ck_assert_msg(args != NULL, "bad test JSON: %s", je.text);
	cae_tool_result res;
	cae_error err;
	ck_assert_msg(cae_session_call_tool(s, tool, args, NULL, &res, &err) == 0, "%s",
		      err.message);
	json_decref(args);
	ck_assert_ptr_nonnull(res.text);
	*is_error = res.is_error;
	json_t *out = json_incref(res.structured);
	cae_tool_result_clear(&res);
	return out;
}

static const char *error_code(json_t *r)
{
	return json_string_value(json_object_get(json_object_get(r, "error"), "code"));
}

#define S(j, k) json_string_value(json_object_get((j), (k)))
#define I(j, k) json_integer_value(json_object_get((j), (k)))
#define B(j, k) json_is_true(json_object_get((j), (k)))

START_TEST(exec_command_echo_hello)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r =
	    call(s, "exec_command", "{\"cwd\": \".\", \"command\": [\"echo\", \"hello\"]}", &e);
	ck_assert(!e);
	ck_assert_int_eq(I(r, "exit_code"), 0);
	ck_assert_str_eq(S(r, "stdout"), "hello\n");
	ck_assert(!B(r, "timed_out"));
	/* command and cwd reflected as given/run (absolute). */
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "command"), 1)),
			 "hello");
	/* the workspace is where commands see it in the sandbox, as in containers */
	ck_assert_str_eq(S(r, "cwd"), "/workspace/project");
	ck_assert_int_ge(I(r, "duration_ms"), 0);
	json_decref(r);
	/* direct mode and the default shell mode quote arguments properly */
	r = call(
	    s, "exec_command",
	    "{\"cwd\": \".\", \"command\": [\"printf\", \"%s|\", \"a b\", \"$HOME\", \"it's\"]}",
	    &e);
	ck_assert_str_eq(S(r, "stdout"), "a b|$HOME|it's|");
	json_decref(r);
	r = call(s, "exec_command",
		 "{\"cwd\": \".\", \"shell_mode\": \"direct\", \"command\": [\"printf\", \"%s|\", "
		 "\"a b\", \"$HOME\"]}",
		 &e);
	ck_assert_str_eq(S(r, "stdout"), "a b|$HOME|");
	json_decref(r);
	/* one element in default mode is a shell command line */
	r = call(s, "exec_command", "{\"cwd\": \".\", \"command\": [\"echo a && echo b\"]}", &e);
	ck_assert_str_eq(S(r, "stdout"), "a\nb\n");
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(exec_command_invalid_arguments)
{
	cae_session *s = open_session(NULL);
	const char *bad[] = {
	    "{\"cwd\": \".\", \"command\": []}",
	    "{\"cwd\": \".\", \"command\": [\"echo\", 1]}",
	    "{\"cwd\": \".\", \"command\": \"echo\"}",
	    "{\"cwd\": \"\", \"command\": [\"echo\"]}",
	    "{\"command\": [\"echo\"]}",
	    "{\"cwd\": \".\", \"command\": [\"echo\"], \"timeout_ms\": 0}",
	    "{\"cwd\": \".\", \"command\": [\"echo\"], \"timeout_ms\": 120001}",
	    "{\"cwd\": \".\", \"command\": [\"echo\"], \"max_output_chars\": 999}",
	    "{\"cwd\": \".\", \"command\": [\"echo\"], \"max_output_chars\": 1000001}",
	    "{\"cwd\": \".\", \"command\": [\"echo\"], \"shell_mode\": \"zsh\"}",
	    "{\"cwd\": \".\", \"command\": [\"echo\"], \"stdin\": 5}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		bool e;
		json_t *r = call(s, "exec_command", bad[i], &e);
		ck_assert_msg(e, "%s accepted", bad[i]);
		ck_assert_str_eq(error_code(r), "INVALID_ARGUMENT");
		json_decref(r);
	}
	close_session(s);
}
END_TEST

START_TEST(exec_command_not_directory)
{
	cae_session *s = open_session(NULL);
	tu_write(ws, "file.txt", "x");
	_cleanup_free_ char *link = cae__path_join(ws, "up");
	ck_assert_int_eq(symlink("/etc", link), 0);
	const char *cwds[] = {"missing", "file.txt",	       "..", "/etc", "../../..",
			      "up",	 "a\\\\..\\\\..\\\\.."};
	for (size_t i = 0; i < sizeof(cwds) / sizeof(cwds[0]); i++) {
		char args[512];
		snprintf(args, sizeof(args), "{\"cwd\": \"%s\", \"command\": [\"pwd\"]}", cwds[i]);
		bool e;
		json_t *r = call(s, "exec_command", args, &e);
		ck_assert_msg(e, "cwd %s accepted", cwds[i]);
		ck_assert_str_eq(error_code(r), "NOT_DIRECTORY");
		json_decref(r);
	}
	/* backslash separators are accepted */
	_cleanup_free_ char *sub = cae__path_join(ws, "a/b");
	cae__mkdir_p(sub, 0755);
	bool e;
	json_t *r = call(s, "exec_command", "{\"cwd\": \"a\\\\b\", \"command\": [\"pwd\"]}", &e);
	ck_assert(!e);
	ck_assert_ptr_nonnull(strstr(S(r, "stdout"), "/a/b\n"));
	json_decref(r);
	close_session(s);
}
END_TEST

/* Both ways the local backend runs commands: confined (bubblewrap) and plain. */
static const char *const sandbox_modes[] = {"  local:\n    sandbox: bubblewrap\n",
					    "  local:\n    sandbox: none\n    unconfined: true\n"};

START_TEST(exec_command_not_found)
{
	cae_session *s = open_session(sandbox_modes[_i]);
	bool e;
	json_t *r = call(
	    s, "exec_command",
	    "{\"cwd\": \".\", \"shell_mode\": \"direct\", \"command\": [\"no-such-cmd-xyz\"]}", &e);
	ck_assert(e);
	ck_assert_str_eq(error_code(r), "COMMAND_NOT_FOUND");
	ck_assert_ptr_nonnull(
	    strstr(json_string_value(json_object_get(json_object_get(r, "error"), "message")),
		   "no-such-cmd-xyz"));
	json_decref(r);
	/* default mode: the shell says so, exit 127 */
	r = call(s, "exec_command", "{\"cwd\": \".\", \"command\": [\"no-such-cmd-xyz\"]}", &e);
	ck_assert(!e);
	ck_assert_int_eq(I(r, "exit_code"), 127);
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(exec_command_timeout_keeps_output)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r =
	    call(s, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"echo started; echo err >&2; sleep 30\"], "
		 "\"timeout_ms\": 300}",
		 &e);
	ck_assert(!e);
	ck_assert(B(r, "timed_out"));
	ck_assert_int_eq(I(r, "exit_code"), 124);
	ck_assert_str_eq(S(r, "stdout"), "started\n");
	ck_assert_str_eq(S(r, "stderr"), "err\n");
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(exec_command_truncates_chars)
{
	cae_session *s = open_session(NULL);
	bool e;
	/* 3000 two-byte characters; the limit counts characters, not bytes. */
	json_t *r = call(s, "exec_command",
			 "{\"cwd\": \".\", \"command\": [\"i=0; while [ $i -lt 3000 ]; do printf "
			 "'\\\\303\\\\251'; i=$((i+1)); done\"], \"max_output_chars\": 1000}",
			 &e);
	ck_assert(!e);
	ck_assert(B(r, "stdout_truncated"));
	ck_assert(!B(r, "stderr_truncated"));
	ck_assert_uint_eq(strlen(S(r, "stdout")), 2000);
	json_decref(r);
	close_session(s);
}
END_TEST

/* Output is kept whole past a NUL byte (find -print0, git ls-files -z, binary output): a
 * command cannot hide what follows one from the agent, and a secret after one is still
 * masked. */
START_TEST(output_kept_whole_past_nul_bytes)
{
	cae_session *s = open_session("github:\n  token: ghp_nul_secret_value_9\n");
	bool e;
	json_t *r = call(s, "command-executor_execute_command",
			 "{\"command\": \"printf 'a\\\\0b\\\\0hidden ghp_nul_secret_value_9'; "
			 "printf 'x\\\\0y' >&2\"}",
			 &e);
	ck_assert(!e);
	json_t *o = json_object_get(r, "stdout");
	ck_assert_uint_eq(json_string_length(o), 14);
	ck_assert_mem_eq(json_string_value(o), "a\0b\0hidden ***", 14);
	ck_assert(!B(r, "stdout_truncated"));
	ck_assert_uint_eq(json_string_length(json_object_get(r, "stderr")), 3);
	ck_assert_mem_eq(S(r, "stderr"), "x\0y", 3);
	json_decref(r);
	/* exec_command, and its character cut counts a NUL as a character */
	r = call(s, "exec_command", "{\"cwd\": \".\", \"command\": [\"printf 'a\\\\0b\\\\0c'\"]}",
		 &e);
	ck_assert(!e);
	ck_assert_uint_eq(json_string_length(json_object_get(r, "stdout")), 5);
	ck_assert_mem_eq(S(r, "stdout"), "a\0b\0c", 5);
	ck_assert(!B(r, "stdout_truncated"));
	json_decref(r);
	r = call(s, "exec_command",
		 "{\"cwd\": \".\", \"max_output_chars\": 1000, \"command\": [\"head -c 1500 "
		 "/dev/zero\"]}",
		 &e);
	ck_assert(!e);
	ck_assert_uint_eq(json_string_length(json_object_get(r, "stdout")), 1000);
	ck_assert(B(r, "stdout_truncated"));
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(exec_command_stdin_and_env)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r =
	    call(s, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"cat\"], \"stdin\": \"h\\u00e9llo\\n\"}", &e);
	ck_assert_str_eq(S(r, "stdout"), "h\xc3\xa9llo\n");
	json_decref(r);
	/* the environment's own environment: nothing of cae's (the manager's) leaks in */
	setenv("CAE_TEST_MARKER", "marker-42", 1);
	r = call(s, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"echo [$CAE_TEST_MARKER] $HOME $USER\"]}", &e);
	ck_assert_str_eq(S(r, "stdout"), "[] /home/agent agent\n");
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(execute_command_semantics)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r = call(s, "command-executor_execute_command",
			 "{\"command\": \"echo out; echo err >&2; exit 3\"}", &e);
	ck_assert(!e);
	ck_assert_int_eq(I(r, "exit_code"), 3);
	ck_assert_str_eq(S(r, "stdout"), "out\n");
	ck_assert_str_eq(S(r, "stderr"), "err\n");
	json_decref(r);
	/* timeout: -1, the specified message, output so far kept */
	r = call(s, "command-executor_execute_command",
		 "{\"command\": \"echo partial; sleep 30\", \"timeout_seconds\": 1}", &e);
	ck_assert_int_eq(I(r, "exit_code"), -1);
	ck_assert_str_eq(S(r, "stderr"), "Command timeout after 1 seconds");
	ck_assert_str_eq(S(r, "stdout"), "partial\n");
	ck_assert(B(r, "timed_out"));
	json_decref(r);
	/* other failures: -1 and "Command execution error: ..." */
	r = call(s, "command-executor_execute_command",
		 "{\"command\": \"pwd\", \"working_directory\": \"/nonexistent\"}", &e);
	ck_assert_int_eq(I(r, "exit_code"), -1);
	ck_assert_int_eq(strncmp(S(r, "stderr"), "Command execution error: ", 25), 0);
	json_decref(r);
	/* working directory */
	_cleanup_free_ char *sub = cae__path_join(ws, "sub");
	mkdir(sub, 0755);
	r = call(s, "command-executor_execute_command",
		 "{\"command\": \"basename $(pwd)\", \"working_directory\": \"sub\"}", &e);
	ck_assert_str_eq(S(r, "stdout"), "sub\n");
	json_decref(r);
	/* stdin is /dev/null */
	r = call(s, "command-executor_execute_command", "{\"command\": \"cat; echo done\"}", &e);
	ck_assert_str_eq(S(r, "stdout"), "done\n");
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(execute_command_policy_denies_before_running)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r = call(s, "command-executor_execute_command",
			 "{\"command\": \"touch ran; sudo ls\"}", &e);
	ck_assert(!e);
	ck_assert_int_eq(I(r, "exit_code"), 126);
	ck_assert_ptr_nonnull(strstr(S(r, "stderr"), "sudo"));
	_cleanup_free_ char *ran = cae__path_join(ws, "ran");
	ck_assert_int_ne(access(ran, F_OK), 0); /* nothing ran */
	json_decref(r);
	r = call(s, "command-executor_execute_command", "{\"command\": \"rm -fr x\"}", &e);
	ck_assert_int_eq(I(r, "exit_code"), 126);
	ck_assert_ptr_nonnull(strstr(S(r, "stderr"), "rm"));
	json_decref(r);
	r = call(s, "exec_command",
		 "{\"cwd\": \".\", \"shell_mode\": \"direct\", \"command\": [\"/usr/bin/sudo\", "
		 "\"ls\"]}",
		 &e);
	ck_assert_int_eq(I(r, "exit_code"), 126);
	json_decref(r);
	r = call(s, "command-executor_execute_command",
		 "{\"command\": \"echo \\\"sudo is a word\\\"\"}", &e);
	ck_assert_int_eq(I(r, "exit_code"), 0);
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(execute_command_redacts_secrets_and_caps)
{
	setenv("GITHUB_PERSONAL_ACCESS_TOKEN", "ghp_secret_value_123", 1);
	state = tu_mkdtemp();
	ws = tu_mkdtemp();
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: local\n  state_dir: %s\n  execution:\n"
		 "    max_output_size: 1000\n    truncate: head_tail\n",
		 state);
	cae_config *cfg;
	cae_error err;
	ck_assert(cae_config_load_string(&cfg, yaml, strlen(yaml), "t.yaml", NULL, &err) == 0);
	cae_log *log = cae_log_new(open("/dev/null", O_WRONLY), CAE_LOG_DEBUG);
	cae_session *s;
	ck_assert(cae_session_new(cfg, log, &s, &err) == 0);
	ck_assert(cae_session_use_workspace(s, ws, &err) == 0);
	bool e;
	/* The token is not in the command's environment (first line); a copy of it that a
	 * command finds elsewhere is masked (second line). */
	char path[4200];
	snprintf(path, sizeof(path), "%s/found.txt", ws);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("token=ghp_secret_value_123\n", f);
	fclose(f);
	json_t *r = call(s, "command-executor_execute_command",
			 "{\"command\": \"echo env=[$GITHUB_PERSONAL_ACCESS_TOKEN]; cat found.txt; "
			 "seq 1 5000\"}",
			 &e);
	const char *out = S(r, "stdout");
	ck_assert_ptr_null(strstr(out, "ghp_secret_value_123"));
	ck_assert_ptr_nonnull(strstr(out, "env=[]\n"));
	ck_assert_ptr_nonnull(strstr(out, "token=***"));
	ck_assert(B(r, "stdout_truncated"));
	ck_assert_ptr_nonnull(strstr(out, "bytes omitted"));
	ck_assert_ptr_nonnull(strstr(out, "5000\n"));
	json_decref(r);
	cae_session_free(s);
	cae_log_free(log);
	cae__rm_rf(state);
	cae__rm_rf(ws);
}
END_TEST

START_TEST(no_environment_is_an_error)
{
	state = tu_mkdtemp();
	char yaml[512];
	snprintf(yaml, sizeof(yaml), "command_executor:\n  backend: local\n  state_dir: %s\n",
		 state);
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	ck_assert(cae_config_load_string(&cfg, yaml, strlen(yaml), "t", envp, &err) == 0);
	cae_session *s;
	ck_assert(cae_session_new(cfg, NULL, &s, &err) == 0);
	bool e;
	json_t *r = call(s, "command-executor_execute_command", "{\"command\": \"true\"}", &e);
	ck_assert(e);
	json_decref(r);
	cae_tool_result res;
	ck_assert_int_eq(cae_session_call_tool(s, "no_such_tool", NULL, NULL, &res, &err), -ENOENT);
	cae_session_free(s);
	cae__rm_rf(state);
}
END_TEST

#define GIT "git -c user.email=t@example.com -c user.name=t -c init.defaultBranch=main"

/* environment_prepare with a task repo; returns the result text (new string). */
static char *prepare_text(cae_session *s, const char *repo, bool *is_error)
{
	json_t *args = json_pack("{s:{s:s, s:s}}", "task", "uuid", "repo-rules", "repo", repo);
	cae_tool_result res;
	cae_error err;
	ck_assert_msg(cae_session_call_tool(s, "environment_prepare", args, NULL, &res, &err) == 0,
		      "%s", err.message);
	json_decref(args);
	*is_error = res.is_error;
	char *t = strdup(res.text);
	cae_tool_result_clear(&res);
	return t;
}

START_TEST(environment_prepare_repo_rules)
{
	json_t *r0;
	char *root = tu_mkdtemp(), *outside = tu_mkdtemp();
	tu_sh("cd %s && mkdir ok && cd ok && " GIT " init -q && echo hi > a.txt && " GIT
	      " add . && " GIT " commit -qm c && cd .. && mkdir notgit && ln -s %s escape",
	      root, outside);
	tu_sh("cd %s && " GIT " init -q && echo secret > s.txt && " GIT " add . && " GIT
	      " commit -qm c",
	      outside);
	char yaml[4096];
	snprintf(yaml, sizeof(yaml), "  local_repo_roots: [%s]\n", root);
	cae_session *s = open_session(yaml);
	char path[8192];
	bool e;

	/* Refused: every path outside the roots, ways around them, and dangerous transports;
	 * the message names only what was given. */
	const char *refused[16];
	char bufs[4][8192];
	size_t n = 0;
	refused[n++] = "/";
	refused[n++] = outside;
	snprintf(bufs[0], sizeof(bufs[0]), "file://%s", outside);
	refused[n++] = bufs[0];
	snprintf(bufs[1], sizeof(bufs[1]), "%s/ok/../../%s", root, strrchr(outside, '/') + 1);
	refused[n++] = bufs[1];
	snprintf(bufs[2], sizeof(bufs[2]), "%s/escape", root);
	refused[n++] = bufs[2];
	snprintf(bufs[3], sizeof(bufs[3]), "%s/escape/.git", root);
	refused[n++] = bufs[3];
	refused[n++] = "/nonexistent/repo";
	refused[n++] = ".";
	refused[n++] = "ext::sh -c touch% /tmp/cae-pwned";
	refused[n++] = "fd::3";
	refused[n++] = "ftp://example.com/r.git";
	refused[n++] = "file://localhost/etc";
	for (size_t i = 0; i < n; i++) {
		char *t = prepare_text(s, refused[i], &e);
		ck_assert_msg(e, "%s accepted: %s", refused[i], t);
		ck_assert_msg(strstr(t, "INVALID_ARGUMENT") && strstr(t, refused[i]), "%s", t);
		ck_assert_msg(!strstr(t, state), "%s names the state directory", t);
		ck_assert_msg(strstr(refused[i], root) || !strstr(t, root), "%s names a root", t);
		if (strncmp(refused[i], "ext::", 5) != 0 && strncmp(refused[i], "fd::", 4) != 0 &&
		    strncmp(refused[i], "ftp:", 4) != 0)
			ck_assert_msg(strstr(t, "local_repo_roots"), "%s", t);
		free(t);
	}
	ck_assert_int_ne(access("/tmp/cae-pwned", F_OK), 0);

	/* Accepted: a repository under a root, by its path or a file:// URL. */
	snprintf(path, sizeof(path), "%s/ok", root);
	char *t = prepare_text(s, path, &e);
	ck_assert_msg(!e, "%s", t);
	/* what the model is told of it names no host path of the operator's */
	ck_assert_msg(!strstr(t, state) && !strstr(t, "host_path"), "%s", t);
	ck_assert_msg(strstr(t, "/workspace/project"), "%s", t);
	free(t);
	r0 = call(s, "environment_list", "{}", &e);
	t = json_dumps(r0, 0);
	ck_assert_msg(!strstr(t, state) && !strstr(t, "host_path"), "%s", t);
	free(t);
	json_decref(r0);
	json_t *r =
	    call(s, "exec_command", "{\"cwd\": \".\", \"command\": [\"cat\", \"a.txt\"]}", &e);
	ck_assert_msg(S(r, "stdout") && strcmp(S(r, "stdout"), "hi\n") == 0, "%s",
		      json_dumps(r, 0));
	json_decref(r);
	snprintf(path, sizeof(path), "file://%s/ok", root);
	t = prepare_text(s, path, &e);
	ck_assert_msg(!e, "%s", t);
	free(t);

	/* Under a root but not a repository: the clone fails, naming no path of cae's own. */
	snprintf(path, sizeof(path), "%s/notgit", root);
	t = prepare_text(s, path, &e);
	ck_assert(e);
	ck_assert_msg(!strstr(t, state), "%s names the state directory", t);
	free(t);
	close_session(s);
	cae__rm_rf(root);
	cae__rm_rf(outside);
	free(root);
	free(outside);
}
END_TEST

START_TEST(model_repo_classes)
{
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	const char *yaml = "command_executor:\n  backend: local\n";
	ck_assert(cae_config_load_string(&cfg, yaml, strlen(yaml), "t", envp, &err) == 0);
	const char *remote[] = {"https://github.com/o/r.git",
				"http://example.com/r",
				"git://example.com/r",
				"ssh://git@example.com/r",
				"git@github.com:o/r.git",
				"HTTPS://example.com/r",
				NULL};
	for (size_t i = 0; remote[i]; i++) {
		cae_task t = {.repo = strdup(remote[i])};
		ck_assert_msg(cae_task_check_model_repo(cfg, &t, &err) == 0, "%s: %s", remote[i],
			      err.message);
		ck_assert_str_eq(t.repo, remote[i]);
		free(t.repo);
	}
	/* no roots configured: every local form refused, existing or not */
	const char *local[] = {"/tmp",	"./x",		 "x",
			       "~",	"/etc/x@y:z",	 "file:///tmp",
			       "tmp:x", "ext::sh -c id", "transport::addr",
			       NULL};
	for (size_t i = 0; local[i]; i++) {
		cae_task t = {.repo = strdup(local[i])};
		cae_error_clear(&err);
		ck_assert_msg(cae_task_check_model_repo(cfg, &t, &err) < 0, "%s accepted",
			      local[i]);
		ck_assert_msg(strstr(err.message, local[i]), "%s", err.message);
		free(t.repo);
	}
	/* platform + owner + name: a URL cae builds */
	cae_task t = {.platform = (char *)"github", .owner = (char *)"o", .name = (char *)"r"};
	ck_assert_int_eq(cae_task_check_model_repo(cfg, &t, &err), 0);
	cae_config_free(cfg);
}
END_TEST

START_TEST(host_paths_hidden_in_place)
{
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	const char *yaml = "command_executor:\n  state_dir: /srv/cae-state\n  docker_host: "
			   "unix:///run/user/7/docker.sock\n";
	ck_assert(cae_config_load_string(&cfg, yaml, strlen(yaml), "t", envp, &err) == 0);
	char msg[96];
	snprintf(msg, sizeof(msg),
		 "create: /srv/cae-state/local/x: Not a directory; "
		 "/srv/cae-state again");
	cae__tools_hide_host_paths(cfg, msg, sizeof(msg));
	ck_assert_str_eq(msg, "create: <state directory>/local/x: Not a directory; <state "
			      "directory> again");
	snprintf(msg, sizeof(msg),
		 "cannot connect to the Docker engine at "
		 "unix:///run/user/7/docker.sock: refused");
	cae__tools_hide_host_paths(cfg, msg, sizeof(msg));
	ck_assert_str_eq(msg, "cannot connect to the Docker engine at <docker socket>: refused");
	/* a replacement longer than what it replaces, at the end of a full buffer: cut */
	cae_config_set(cfg, "command_executor.state_dir", "/s", NULL);
	char small[40];
	snprintf(small, sizeof(small), "%s", "0123456789012345678901234567890123 /s");
	cae__tools_hide_host_paths(cfg, small, sizeof(small));
	ck_assert_uint_lt(strlen(small), sizeof(small));
	ck_assert_str_eq(small, "0123456789012345678901234567890123 ");
	cae_config_free(cfg);
}
END_TEST

START_TEST(state_dir_hidden_from_errors)
{
	/* A state directory the local backend cannot use: the result says so without naming
	 * it. */
	cae_session *s = open_session(NULL);
	char *root = state;
	/* the environment's place is taken by a file */
	tu_sh("rm -rf %s/local && touch %s/local", root, root);
	json_t *args = json_pack("{s:{s:s, s:s}}", "task", "uuid", "odd-state", "repo",
				 "https://example.invalid/r.git");
	cae_tool_result res;
	cae_error err;
	ck_assert_int_eq(cae_session_call_tool(s, "environment_prepare", args, NULL, &res, &err),
			 0);
	json_decref(args);
	ck_assert(res.is_error);
	ck_assert_msg(!strstr(res.text, state), "%s names the state directory", res.text);
	cae_tool_result_clear(&res);
	/* the same for a command in an environment whose directory went away */
	bool e;
	json_t *r = call(s, "exec_command", "{\"cwd\": \".\", \"command\": [\"true\"]}", &e);
	_cleanup_free_ char *txt = json_dumps(r, 0);
	ck_assert_msg(!strstr(txt, state), "%s names the state directory", txt);
	json_decref(r);
	tu_sh("rm -f %s/local", root);
	close_session(s);
}
END_TEST

/* The session owns its secrets: tool output is masked with or without a logger (_i 0: no
 * logger, 1: a logger, whose lines must not show the tokens either). */
/* Live output as progress: every message the caller receives. */
struct seen_progress {
	char text[8192];
	size_t len;
	int count;
	double last;
	bool increasing;
};

static void on_progress(void *ud, double progress, double total, const char *message)
{
	(void)total;
	struct seen_progress *p = ud;
	p->increasing = p->increasing && (p->count == 0 || progress > p->last);
	p->last = progress;
	p->count++;
	int n = snprintf(p->text + p->len, sizeof(p->text) - p->len, "%s|", message ? message : "");
	if (n > 0)
		p->len = MIN(p->len + (size_t)n, sizeof(p->text) - 1);
}

START_TEST(secrets_masked_with_or_without_logger)
{
	char *logdir = tu_mkdtemp();
	_cleanup_free_ char *logpath = cae__path_join(logdir, "log");
	cae_log *log = NULL;
	int logfd = -1;
	if (_i == 1) {
		logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		ck_assert_int_ge(logfd, 0);
		log = cae_log_new(logfd, CAE_LOG_DEBUG);
	}
	cae_session *s = open_session_log("github:\n  token: ghp_tokenvalue_0001\ngitlab:\n"
					  "  token: glpat-tokenvalue-0002\n",
					  log);
	ck_assert_int_eq(cae_session_add_secret(s, "added-secret-0003"), 0);
	ck_assert_int_eq(cae_session_add_secret(s, "abc"), -EINVAL);
	tu_sh("printf 'gh=ghp_tokenvalue_0001\ngl=glpat-tokenvalue-0002\nx=added-secret-0003\n' "
	      ">%s/found.txt",
	      ws);
	bool e;
	json_t *r =
	    call(s, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"cat found.txt; cat found.txt >&2\"]}", &e);
	ck_assert(!e);
	ck_assert_str_eq(S(r, "stdout"), "gh=***\ngl=***\nx=***\n");
	ck_assert_str_eq(S(r, "stderr"), "gh=***\ngl=***\nx=***\n");
	json_decref(r);
	r = call(s, "command-executor_execute_command", "{\"command\": \"cat found.txt\"}", &e);
	ck_assert(!e);
	ck_assert_str_eq(S(r, "stdout"), "gh=***\ngl=***\nx=***\n");
	json_decref(r);
	/* Live output (progress notifications) of both command tools is masked the same way. */
	const char *live_tools[][2] = {
	    {"exec_command", "{\"cwd\": \".\", \"command\": [\"cat found.txt >&2\"]}"},
	    {"command-executor_execute_command", "{\"command\": \"cat found.txt\"}"}};
	for (int t = 0; t < 2; t++) {
		struct seen_progress seen = {.increasing = true};
		cae_call_ctx ctx = {
		    .cancel_fd = -1, .progress = on_progress, .progress_userdata = &seen};
		json_t *a = json_loads(live_tools[t][1], 0, NULL);
		cae_tool_result lr;
		cae_error le;
		ck_assert_msg(cae_session_call_tool(s, live_tools[t][0], a, &ctx, &lr, &le) == 0,
			      "%s", le.message);
		json_decref(a);
		ck_assert_msg(seen.count > 0 && strstr(seen.text, "gh=***"), "%s: %s",
			      live_tools[t][0], seen.text);
		ck_assert_msg(!strstr(seen.text, "tokenvalue") &&
				  !strstr(seen.text, "added-secret"),
			      "%s", seen.text);
		ck_assert(seen.increasing);
		cae_tool_result_clear(&lr);
	}
	/* The patch worker's output (a shell command of the patch) too, text and structure. */
	json_t *args = json_pack("{s:s}", "patch", "```bash\ncat found.txt\n```\n");
	cae_tool_result res;
	cae_error err;
	ck_assert_msg(cae_session_call_tool(s, "apply_patch", args, NULL, &res, &err) == 0, "%s",
		      err.message);
	json_decref(args);
	_cleanup_free_ char *structured = json_dumps(res.structured, 0);
	ck_assert_msg(strstr(structured, "gh=***") && !strstr(structured, "tokenvalue") &&
			  !strstr(structured, "added-secret"),
		      "%s", structured);
	ck_assert_msg(!strstr(res.text, "tokenvalue") && !strstr(res.text, "added-secret"), "%s",
		      res.text);
	cae_tool_result_clear(&res);
	/* The text editor's results too: a view of the file, the snippets of str_replace and
	 * insert, undo_edit's; the text a model reads and the structure alike. */
	const char *editor_calls[] = {
	    "{\"command\": \"view\", \"path\": \"found.txt\"}",
	    "{\"command\": \"str_replace\", \"path\": \"found.txt\", \"old_str\": \"gl=\", "
	    "\"new_str\": \"gitlab=\"}",
	    "{\"command\": \"insert\", \"path\": \"found.txt\", \"insert_line\": 1, "
	    "\"new_str\": \"inserted\"}",
	    "{\"command\": \"undo_edit\", \"path\": \"found.txt\"}",
	    "{\"command\": \"view\", \"path\": \"found.txt\", \"view_range\": [2, 3]}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(editor_calls); i++) {
		json_t *a = json_loads(editor_calls[i], 0, NULL);
		ck_assert_msg(cae_session_call_tool(s, "text_editor", a, NULL, &res, &err) == 0,
			      "%s", err.message);
		json_decref(a);
		_cleanup_free_ char *st = json_dumps(res.structured, 0);
		ck_assert_msg(!res.is_error, "%s: %s", editor_calls[i], res.text);
		ck_assert_msg(strstr(res.text, "***"), "%s: %s", editor_calls[i], res.text);
		ck_assert_msg(!strstr(res.text, "tokenvalue") && !strstr(res.text, "added-secret"),
			      "%s: %s", editor_calls[i], res.text);
		ck_assert_msg(!strstr(st, "tokenvalue") && !strstr(st, "added-secret"), "%s: %s",
			      editor_calls[i], st);
		cae_tool_result_clear(&res);
	}
	close_session(s);
	if (log) {
		cae_log_event(log, CAE_LOG_INFO, "test.after",
			      "ghp_tokenvalue_0001 added-secret-0003");
		cae_log_free(log);
		close(logfd);
		_cleanup_free_ char *raw = NULL;
		size_t len;
		ck_assert_int_eq(cae__read_file(AT_FDCWD, logpath, 1 << 20, &raw, &len), 0);
		ck_assert_msg(!strstr(raw, "tokenvalue") && !strstr(raw, "added-secret"), "%s",
			      raw);
		ck_assert_ptr_nonnull(strstr(raw, "\"msg\":\"*** ***\""));
	}
	cae__rm_rf(logdir);
	free(logdir);
}
END_TEST

/* Every tool name is a row of the table, which dispatch, listing and the quick check read. */
START_TEST(tool_table_rows)
{
	for (size_t i = 0; i < cae__tool_table_size; i++) {
		const cae_tool_def *t = &cae__tool_table[i];
		ck_assert_ptr_eq(cae__tool_lookup(t->name), t);
		ck_assert_ptr_nonnull(t->enabled);
		ck_assert_ptr_nonnull(t->call);
		json_t *d = t->definition();
		ck_assert_str_eq(S(d, "name"), t->name);
		ck_assert(json_is_string(json_object_get(d, "description")));
		ck_assert(json_is_object(json_object_get(d, "parameters")));
		json_decref(d);
	}
	ck_assert_ptr_null(cae__tool_lookup("no_such_tool"));
	ck_assert_ptr_null(cae__tool_lookup(NULL));

	/* Everything enabled: the MCP listing is the table minus the split editor. */
	cae_session *s = open_session(NULL);
	json_t *list = cae_session_tool_list(s, true);
	size_t k = 0;
	for (size_t i = 0; i < cae__tool_table_size; i++) {
		const cae_tool_def *t = &cae__tool_table[i];
		if (t->family == CAE_TOOL_EDITOR_SPLIT)
			continue;
		json_t *l = json_array_get(list, k++);
		ck_assert_str_eq(S(l, "name"), t->name);
		ck_assert(!json_object_get(l, "outputSchema") == !t->output_schema);
	}
	ck_assert_uint_eq(json_array_size(list), k);
	json_decref(list);
	json_t *view = json_pack("{s:s}", "command", "view");
	json_t *create = json_pack("{s:s}", "command", "create");
	ck_assert(cae_session_call_is_quick(s, "text_editor_view", NULL));
	ck_assert(cae_session_call_is_quick(s, "text_editor", view));
	ck_assert(!cae_session_call_is_quick(s, "text_editor", create));
	ck_assert(!cae_session_call_is_quick(s, "text_editor", NULL));
	ck_assert(!cae_session_call_is_quick(s, "text_editor_create", NULL));
	ck_assert(!cae_session_call_is_quick(s, "exec_command", view));
	ck_assert(!cae_session_call_is_quick(s, "no_such_tool", view));
	/* A split editor name works whether or not the listing splits the editor. */
	tu_sh("printf 'one\\n' >%s/f.txt", ws);
	bool e;
	json_t *r = call(s, "text_editor_view", "{\"path\": \"f.txt\"}", &e);
	ck_assert(!e);
	ck_assert_str_eq(S(r, "command"), "view");
	json_decref(r);
	close_session(s);

	/* Everything the configuration can disable disabled: not listed, not dispatched, not
	 * quick. */
	s = open_session("  enabled: false\ntext_editor_mcp:\n  enabled: false\nworker:\n"
			 "  enabled: false\n");
	list = cae_session_tool_list(s, true);
	for (size_t i = 0; i < cae__tool_table_size; i++) {
		const cae_tool_def *t = &cae__tool_table[i];
		bool listed = false;
		size_t j;
		json_t *l;
		json_array_foreach(list, j, l) listed |= strcmp(S(l, "name"), t->name) == 0;
		if (t->family == CAE_TOOL_ENVIRONMENT) { /* never disabled */
			ck_assert_msg(listed, "%s not listed", t->name);
			continue;
		}
		ck_assert_msg(!listed, "%s listed", t->name);
		cae_tool_result res;
		cae_error err;
		ck_assert_int_eq(cae_session_call_tool(s, t->name, NULL, NULL, &res, &err),
				 -ENOENT);
		ck_assert_ptr_nonnull(strstr(err.message, "(disabled)"));
	}
	ck_assert_uint_eq(json_array_size(list), 7); /* the environment_* tools */
	json_decref(list);
	ck_assert(!cae_session_call_is_quick(s, "text_editor_view", NULL));
	ck_assert(!cae_session_call_is_quick(s, "text_editor", view));
	json_decref(view);
	json_decref(create);
	close_session(s);
}
END_TEST

START_TEST(definitions_exec_command_exact)
{
	cae_config *cfg = cae_config_defaults(NULL);
	cae_tools_options o = {.format = CAE_TOOLS_FUNCTIONS};
	json_t *defs = cae_tools_definitions(cfg, &o);
	json_t *ec = NULL;
	size_t i;
	json_t *d;
	json_array_foreach(defs, i, d) if (strcmp(S(d, "name"), "exec_command") == 0) ec = d;
	ck_assert_ptr_nonnull(ec);
	/* the specification's strings, verbatim */
	const char *expected =
	    "{\"name\": \"exec_command\", \"description\": \"Runs a command once in the workspace "
	    "and returns stdout, stderr, and exit code.\", \"parameters\": {\"type\": \"object\", "
	    "\"properties\": {\"cwd\": {\"type\": \"string\", \"description\": \"Working directory "
	    "path in workspace.\"}, \"command\": {\"type\": \"array\", \"items\": {\"type\": "
	    "\"string\"}, \"description\": \"Only the target command tokens to run (e.g. bun run "
	    "dev).\"}, \"shell_mode\": {\"type\": \"string\", \"enum\": [\"default\", \"direct\"], "
	    "\"default\": \"default\", \"description\": \"Use default to apply OS shell wrapper "
	    "automatically (default: default).\"}, \"stdin\": {\"type\": \"string\", "
	    "\"description\": \"UTF-8 stdin text.\"}, \"timeout_ms\": {\"type\": \"number\", "
	    "\"default\": 30000, \"description\": \"Execution timeout in milliseconds (default: "
	    "30000).\"}, \"max_output_chars\": {\"type\": \"number\", \"default\": 200000, "
	    "\"description\": \"Per-stream output char limit (default: 200000).\"}}, "
	    "\"required\": [\"cwd\", \"command\"]}}";
	json_t *want = json_loads(expected, 0, NULL);
	ck_assert_ptr_nonnull(want);
	/* The limits are stated in schema keywords, which leave the specification's strings
	 * as they are: without exactly those keywords the definition is the specification's. */
	json_t *props = json_object_get(json_object_get(ec, "parameters"), "properties");
	json_t *cmd = json_object_get(props, "command");
	json_t *tmo = json_object_get(props, "timeout_ms");
	json_t *moc = json_object_get(props, "max_output_chars");
	ck_assert_int_eq(I(cmd, "minItems"), 1);
	ck_assert_int_eq(I(cmd, "maxItems"), 4096);
	ck_assert_int_eq(I(tmo, "minimum"), 1);
	ck_assert_int_eq(I(tmo, "maximum"), 120000);
	ck_assert_int_eq(I(moc, "minimum"), 1000);
	ck_assert_int_eq(I(moc, "maximum"), 1000000);
	json_t *bare = json_deep_copy(ec);
	props = json_object_get(json_object_get(bare, "parameters"), "properties");
	ck_assert_int_eq(json_object_del(json_object_get(props, "command"), "minItems"), 0);
	ck_assert_int_eq(json_object_del(json_object_get(props, "command"), "maxItems"), 0);
	const char *ranged[] = {"timeout_ms", "max_output_chars"};
	for (size_t k = 0; k < 2; k++) {
		ck_assert_int_eq(json_object_del(json_object_get(props, ranged[k]), "minimum"), 0);
		ck_assert_int_eq(json_object_del(json_object_get(props, ranged[k]), "maximum"), 0);
	}
	ck_assert(json_equal(bare, want));
	json_decref(bare);
	json_decref(want);
	json_decref(defs);
	/* OpenAI form wraps; disabled feature -> empty */
	o.format = CAE_TOOLS_OPENAI;
	defs = cae_tools_definitions(cfg, &o);
	ck_assert_str_eq(S(json_array_get(defs, 0), "type"), "function");
	ck_assert_str_eq(S(json_object_get(json_array_get(defs, 0), "function"), "name"),
			 "command-executor_execute_command");
	json_decref(defs);
	cfg->command_executor.enabled = false;
	json_t *f = cae_tools_command_executor_functions(cfg);
	ck_assert_uint_eq(json_array_size(f), 0);
	json_decref(f);
	cfg->text_editor_mcp.enabled = false;
	o.format = CAE_TOOLS_FUNCTIONS;
	defs = cae_tools_definitions(cfg, &o);
	ck_assert_uint_eq(json_array_size(defs), 0);
	json_decref(defs);
	cae_config_free(cfg);
}
END_TEST

START_TEST(definitions_editor_forms_and_platform_filter)
{
	cae_config *cfg = cae_config_defaults(NULL);
	json_t *one = cae_tools_text_editor_functions(cfg, false);
	ck_assert_uint_eq(json_array_size(one), 1);
	ck_assert_str_eq(S(json_array_get(one, 0), "name"), "text_editor");
	json_t *cmd = json_object_get(
	    json_object_get(json_object_get(json_array_get(one, 0), "parameters"), "properties"),
	    "command");
	ck_assert_uint_eq(json_array_size(json_object_get(cmd, "enum")), 5);
	json_decref(one);
	json_t *split = cae_tools_text_editor_functions(cfg, true);
	ck_assert_uint_eq(json_array_size(split), 5);
	ck_assert_str_eq(S(json_array_get(split, 2), "name"), "text_editor_str_replace");
	json_decref(split);
	json_t *tools = json_pack(
	    "[{s:s}, {s:s}, {s:s}, {s:{s:s}}, {s:s}, {s:s}, {s:s}, {s:s}, {s:s}, {s:s}, {s:s}]",
	    "name", "github_create_or_update_file", "name", "text_editor", "name",
	    "gitlab_push_files", "function", "name", "github_get_file_contents", "name",
	    "push_files", "name", "get_file_contents", "name", "create_or_update_file", "name",
	    "mcp__github__create_issue", "name", "create_issue", "name", "githubby_tool", "name",
	    "get_pull_request_files");
	json_t *f = cae_tools_filter_platform_tools(cfg, tools);
	ck_assert_uint_eq(json_array_size(f), 4);
	ck_assert_str_eq(S(json_array_get(f, 0), "name"), "text_editor");
	ck_assert_str_eq(S(json_array_get(f, 1), "name"), "create_issue");
	ck_assert_str_eq(S(json_array_get(f, 2), "name"), "githubby_tool");
	json_decref(f);
	cfg->text_editor_mcp.enabled = false;
	f = cae_tools_filter_platform_tools(cfg, tools);
	ck_assert_uint_eq(json_array_size(f), 11);
	json_decref(f);
	json_decref(tools);
	cae_config_free(cfg);
}
END_TEST

/* The text a tool call returns (new), and whether it is an error. */
static char *call_text(cae_session *s, const char *tool, json_t *args, bool *is_error)
{
	cae_tool_result res;
	cae_error err;
	ck_assert_msg(cae_session_call_tool(s, tool, args, NULL, &res, &err) == 0, "%s: %s", tool,
		      err.message);
	*is_error = res.is_error;
	char *t = strdup(res.text ? res.text : "");
	cae_tool_result_clear(&res);
	return t;
}

static const char *const small_numbers[] = {"zero", "one", "two", "three", "four", "five"};

/* True when text states n: as a number not inside a longer one, or (up to five) as a word. */
static bool states_number(const char *text, long long n)
{
	char num[32];
	snprintf(num, sizeof(num), "%lld", n);
	size_t l = strlen(num);
	for (const char *p = strstr(text, num); p; p = strstr(p + 1, num)) {
		bool digit_before = p > text && (p[-1] >= '0' && p[-1] <= '9');
		bool minus_before = n >= 0 && p > text && p[-1] == '-';
		bool digit_after = p[l] >= '0' && p[l] <= '9';
		if (!digit_before && !minus_before && !digit_after)
			return true;
	}
	return n >= 0 && n < (long long)ARRAY_SIZE(small_numbers) &&
	       strstr(text, small_numbers[n]) != NULL;
}

/* Arguments under which a tool's bounded argument reaches its check; the probe sets the
 * argument itself. A bounded argument without a row here fails the test: add one. */
static const struct {
	const char *tool, *arg, *base;
} probes[] = {
    {"command-executor_execute_command", "timeout_seconds", "{\"command\": \"true\"}"},
    {"exec_command", "timeout_ms", "{\"cwd\": \".\", \"command\": [\"true\"]}"},
    {"exec_command", "max_output_chars", "{\"cwd\": \".\", \"command\": [\"true\"]}"},
    {"exec_command", "command", "{\"cwd\": \".\"}"},
    {"text_editor", "insert_line",
     "{\"command\": \"insert\", \"path\": \"f.txt\", \"new_str\": \"x\\n\"}"},
    {"text_editor", "view_range", "{\"command\": \"view\", \"path\": \"f.txt\"}"},
    {"text_editor_insert", "insert_line", "{\"path\": \"f.txt\", \"new_str\": \"x\\n\"}"},
    {"text_editor_view", "view_range", "{\"path\": \"f.txt\"}"},
    {"apply_patch", "patch", "{\"dry_run\": true}"},
    {"process_start", "wait_ms", "{\"command\": \"true\"}"},
    {"process_start", "timeout_seconds", "{\"command\": \"true\"}"},
    {"process_start", "max_chars", "{\"command\": \"true\"}"},
    /* "new": a session of its own, started for the probe */
    {"process_read", "wait_ms", "{\"session_id\": \"new\"}"},
    {"process_read", "max_chars", "{\"session_id\": \"new\"}"},
    {"process_wait", "timeout_ms", "{\"session_id\": \"new\"}"},
    {"process_wait", "max_chars", "{\"session_id\": \"new\"}"},
    {"environment_port_forward", "port", "{}"},
};

/* One probe: tool with base and arg = v (stolen). Returns the call's text; *refused when it
 * is an error. */
static char *probe(cae_session *s, const char *tool, const char *arg, json_t *v, bool *refused)
{
	const char *base = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(probes); i++)
		if (strcmp(probes[i].tool, tool) == 0 && strcmp(probes[i].arg, arg) == 0)
			base = probes[i].base;
	ck_assert_msg(base != NULL, "%s.%s is bounded: give it a row in probes[]", tool, arg);
	json_t *args = json_loads(base, 0, NULL);
	ck_assert_ptr_nonnull(args);
	json_object_set_new(args, arg, v);
	const char *sid = json_string_value(json_object_get(args, "session_id"));
	if (sid && strcmp(sid, "new") == 0) {
		bool e;
		json_t *r =
		    call(s, "process_start", "{\"command\": \"true\", \"wait_ms\": 10000}", &e);
		ck_assert_msg(!e, "%s", json_dumps(r, 0));
		json_object_set(args, "session_id", json_object_get(r, "session_id"));
		json_decref(r);
	}
	tu_sh("printf 'one\\ntwo\\nthree\\n' >%s/f.txt", ws);
	char *t = call_text(s, tool, args, refused);
	json_decref(args);
	return t;
}

/* An array of n copies of item (new). */
static json_t *array_of(size_t n, json_t *item)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append(a, item);
	json_decref(item);
	return a;
}

/* The schema's integer keyword, or fallback when it has none. */
static long long keyword(json_t *schema, const char *k, long long fallback, bool *has)
{
	json_t *v = json_object_get(schema, k);
	*has = json_is_integer(v);
	return *has ? (long long)json_integer_value(v) : fallback;
}

/* Checks one bounded property of a tool: values just outside each stated bound, and far
 * outside any, are refused with a message that states the range; values at a stated bound
 * are not refused; a bound no schema keyword states is refused only where the description
 * says so ("at least" / "at most"). Numbers, and the items of arrays of numbers, are probed
 * by value; arrays by length. */
static void check_property(cae_session *s, const char *tool, const char *arg, json_t *schema,
			   int *probed)
{
	const char *type = S(schema, "type");
	const char *desc = S(schema, "description") ? S(schema, "description") : "";
	json_t *items = json_object_get(schema, "items");
	json_t *any = json_object_get(schema, "anyOf");
	bool is_num = type && (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0);
	bool is_array = type && strcmp(type, "array") == 0;
	if (!is_array && json_is_array(any)) { /* apply_patch's patch: its array form */
		size_t i;
		json_t *alt;
		json_array_foreach(any, i,
				   alt) if (S(alt, "type") && strcmp(S(alt, "type"), "array") == 0)
		{
			schema = alt;
			is_array = true;
			items = json_object_get(alt, "items");
		}
	}
	if (!is_num && !is_array)
		return;
	bool has_lo, has_hi;
	char *t;
	bool refused;
	if (is_array) {
		long long lo = keyword(schema, "minItems", 0, &has_lo);
		long long hi = keyword(schema, "maxItems", 0, &has_hi);
		const char *it = S(items, "type");
		json_t *item = it && strcmp(it, "string") == 0 ? json_string("true")
			       : it && strcmp(it, "object") == 0
				   ? json_pack("{s:s, s:s, s:s}", "type", "shell_command", "action",
					       "run", "target", "true")
				   : json_integer(1);
		if (has_hi) {
			t = probe(s, tool, arg, array_of((size_t)hi + 1, json_incref(item)),
				  &refused);
			ck_assert_msg(refused && states_number(t, hi), "%s.%s: %lld items: %s",
				      tool, arg, hi + 1, t);
			free(t);
			(*probed)++;
		} else {
			t = probe(s, tool, arg, array_of(20000, json_incref(item)), &refused);
			ck_assert_msg(!refused || strstr(desc, "at most"),
				      "%s.%s: a length bound no schema states: %s", tool, arg, t);
			free(t);
		}
		if (has_lo && lo > 0) {
			t = probe(s, tool, arg, array_of((size_t)lo - 1, json_incref(item)),
				  &refused);
			ck_assert_msg(refused && states_number(t, lo), "%s.%s: %lld items: %s",
				      tool, arg, lo - 1, t);
			free(t);
			(*probed)++;
		}
		json_decref(item);
		if (it && (strcmp(it, "integer") == 0 || strcmp(it, "number") == 0)) {
			/* the items' own bounds, in an array of the allowed length */
			long long ilo = keyword(items, "minimum", 0, &has_lo);
			size_t n = (size_t)keyword(schema, "minItems", 1, &has_hi);
			if (has_lo) {
				json_t *a = array_of(n, json_integer(1));
				json_array_set_new(a, n - 1, json_integer(ilo - 1));
				t = probe(s, tool, arg, a, &refused);
				ck_assert_msg(refused && states_number(t, ilo),
					      "%s.%s: item %lld: %s", tool, arg, ilo - 1, t);
				free(t);
				(*probed)++;
			}
		}
		return;
	}
	long long lo = keyword(schema, "minimum", 0, &has_lo);
	long long hi = keyword(schema, "maximum", 0, &has_hi);
	const long long far = 1000000000000LL;
	if (has_lo) {
		long long outside[] = {lo - 1, -far};
		for (size_t k = 0; k < 2; k++) {
			t = probe(s, tool, arg, json_integer(outside[k]), &refused);
			ck_assert_msg(refused && states_number(t, lo) &&
					  (!has_hi || states_number(t, hi)),
				      "%s.%s = %lld: %s", tool, arg, outside[k], t);
			free(t);
		}
		t = probe(s, tool, arg, json_integer(lo), &refused);
		ck_assert_msg(!refused, "%s.%s = %lld (its minimum) refused: %s", tool, arg, lo, t);
		free(t);
		(*probed)++;
	} else {
		t = probe(s, tool, arg, json_integer(-far), &refused);
		ck_assert_msg(!refused || strstr(desc, "at least"),
			      "%s.%s: a lower bound no schema states: %s", tool, arg, t);
		free(t);
	}
	if (has_hi) {
		long long outside[] = {hi + 1, far};
		for (size_t k = 0; k < 2; k++) {
			t = probe(s, tool, arg, json_integer(outside[k]), &refused);
			ck_assert_msg(refused && states_number(t, hi) &&
					  (!has_lo || states_number(t, lo)),
				      "%s.%s = %lld: %s", tool, arg, outside[k], t);
			free(t);
		}
		t = probe(s, tool, arg, json_integer(hi), &refused);
		ck_assert_msg(!refused, "%s.%s = %lld (its maximum) refused: %s", tool, arg, hi, t);
		free(t);
		(*probed)++;
	} else {
		t = probe(s, tool, arg, json_integer(far), &refused);
		ck_assert_msg(!refused || strstr(desc, "at most"),
			      "%s.%s: an upper bound no schema states: %s", tool, arg, t);
		/* a bound the description states is still told in the refusal */
		ck_assert_msg(!refused || strstr(t, "range") || strstr(t, "within"), "%s.%s: %s",
			      tool, arg, t);
		free(t);
	}
}

/* Every numeric limit a tool enforces is stated in its schema (or, for a bound that depends
 * on the file, its description), and an out-of-range value is refused with the range. The
 * limits are found by probing every bounded argument of every tool, so a new unstated limit
 * fails here. */
START_TEST(limits_stated_and_enforced)
{
	cae_session *s = open_session(NULL);
	json_t *list = cae_session_tool_list(s, false);
	json_t *split = cae_tools_text_editor_functions(cae_session_config(s), true);
	size_t i;
	json_t *t;
	json_array_foreach(split, i, t)
	{
		json_array_append_new(list,
				      json_pack("{s:O, s:O}", "name", json_object_get(t, "name"),
						"inputSchema", json_object_get(t, "parameters")));
	}
	json_decref(split);
	int probed = 0;
	json_array_foreach(list, i, t)
	{
		const char *key;
		json_t *prop;
		json_object_foreach(
		    json_object_get(json_object_get(t, "inputSchema"), "properties"), key, prop)
		{
			check_property(s, S(t, "name"), key, prop, &probed);
		}
	}
	/* exec_command's two ranges and its argv length, execute_command's timeout, the
	 * editor's insert_line and view_range (each in both forms), apply_patch's commands */
	ck_assert_int_ge(probed, 12);
	json_decref(list);
	close_session(s);
}
END_TEST

/* The bounds stated only in descriptions: the patch worker's (from its constants) and the
 * editor's file size (from the configuration); a value past one is refused with it. */
START_TEST(limits_in_descriptions)
{
	cae_session *s = open_session("text_editor_mcp:\n  max_file_size: 1k\n");
	json_t *list = cae_session_tool_list(s, false);
	const char *patch_desc = NULL, *file_text_desc = NULL;
	size_t i;
	json_t *t;
	json_array_foreach(list, i, t)
	{
		json_t *props = json_object_get(json_object_get(t, "inputSchema"), "properties");
		if (strcmp(S(t, "name"), "apply_patch") == 0)
			patch_desc = S(json_object_get(props, "patch"), "description");
		if (strcmp(S(t, "name"), "text_editor") == 0)
			file_text_desc = S(json_object_get(props, "file_text"), "description");
	}
	ck_assert_ptr_nonnull(patch_desc);
	ck_assert_ptr_nonnull(file_text_desc);
	char want[64];
	snprintf(want, sizeof(want), "%zu MiB of text", CAE_PATCH_MAX_INPUT >> 20);
	ck_assert_ptr_nonnull(strstr(patch_desc, want));
	snprintf(want, sizeof(want), "%zu MiB", CAE_PATCH_MAX_LINE >> 20);
	ck_assert_ptr_nonnull(strstr(patch_desc, want));
	snprintf(want, sizeof(want), "%d commands", CAE_PATCH_MAX_COMMANDS);
	ck_assert_ptr_nonnull(strstr(patch_desc, want));
	ck_assert_ptr_nonnull(strstr(file_text_desc, "text_editor_mcp.max_file_size"));
	/* past them: refused, the limit stated */
	size_t n = CAE_PATCH_MAX_INPUT + 1;
	char *big = malloc(n + 1);
	memset(big, 'a', n);
	big[n] = '\0';
	json_t *args = json_pack("{s:s%, s:b}", "patch", big, n, "dry_run", 1);
	free(big);
	bool e;
	char *out = call_text(s, "apply_patch", args, &e);
	ck_assert_msg(e && states_number(out, (long long)CAE_PATCH_MAX_INPUT), "%s", out);
	free(out);
	json_decref(args);
	n = CAE_PATCH_MAX_LINE + 1;
	big = malloc(n + 64);
	memcpy(big, "```bash\n", 8);
	memset(big + 8, 'a', n);
	memcpy(big + 8 + n, "\n```\n", 6);
	args = json_pack("{s:s, s:b}", "patch", big, "dry_run", 1);
	free(big);
	out = call_text(s, "apply_patch", args, &e);
	ck_assert_msg(e && states_number(out, (long long)CAE_PATCH_MAX_LINE), "%.300s", out);
	free(out);
	json_decref(args);
	char text[1100];
	memset(text, 'x', 1025);
	text[1025] = '\0';
	args =
	    json_pack("{s:s, s:s, s:s}", "command", "create", "path", "big.txt", "file_text", text);
	out = call_text(s, "text_editor", args, &e);
	ck_assert_msg(e && states_number(out, 1024), "%s", out);
	free(out);
	json_decref(args);
	text[1024] = '\0';
	args =
	    json_pack("{s:s, s:s, s:s}", "command", "create", "path", "big.txt", "file_text", text);
	out = call_text(s, "text_editor", args, &e);
	ck_assert_msg(!e, "%s", out);
	free(out);
	json_decref(args);
	json_decref(list);
	close_session(s);
}
END_TEST

/* ---- process sessions ---- */

/* Whether a process of this host has token in its command line. */
static bool host_process_with(const char *token)
{
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	bool found = false;
	while (!found && (de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char path[300], buf[4096];
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		for (size_t i = 0; i < n; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
		buf[n] = '\0';
		/* not this test's own shell asking */
		found = strstr(buf, token) && !strstr(buf, "host_process_with");
	}
	closedir(d);
	return found;
}

/* Calls a process tool with a JSON object made by json_pack-style arguments. */
static json_t *pcall(cae_session *s, const char *tool, bool *is_error, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	json_t *args = json_vpack_ex(NULL, 0, fmt, ap);
	va_end(ap);
	ck_assert_ptr_nonnull(args);
	char *text = json_dumps(args, 0);
	json_decref(args);
	json_t *r = call(s, tool, text, is_error);
	free(text);
	return r;
}

/* Reads until the session's output so far contains want (or it ended); returns it all. */
static char *read_until(cae_session *s, const char *sid, const char *want)
{
	char *all = strdup("");
	for (int i = 0; i < 200 && !strstr(all, want); i++) {
		bool e;
		json_t *r =
		    pcall(s, "process_read", &e, "{s:s, s:i}", "session_id", sid, "wait_ms", 2000);
		ck_assert_msg(!e, "%s", json_dumps(r, 0));
		char *more;
		ck_assert_int_ge(asprintf(&more, "%s%s", all, S(r, "output")), 0);
		free(all);
		all = more;
		bool ended = strcmp(S(r, "state"), "running") != 0 && !B(r, "more");
		json_decref(r);
		if (ended)
			break;
	}
	return all;
}

/* A filtered network (a domain allow-list): commands and process sessions get the proxy
 * variables, a refused name is reported once, in the next result that follows it:
 * process_read for what a session's command was refused, exec_command for its own. */
START_TEST(filtered_network_reports_refusals)
{
	cae_session *s = open_session("  docker:\n    network:\n      whitelist_mode: true\n"
				      "      allowed_domains: [allowed.test]\n");
	bool e;
	json_t *r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
			  "curl -sS -m 10 http://denied.test:7/x; echo; echo curl-done; sleep 60",
			  "wait_ms", 0);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	/* the start's own page may hold it all already */
	json_t *denied = json_incref(json_object_get(r, "network_denied"));
	char out[4096] = "";
	snprintf(out, sizeof(out), "%s", S(r, "output"));
	json_decref(r);
	for (int i = 0; i < 100 && !strstr(out, "curl-done"); i++) {
		r = pcall(s, "process_read", &e, "{s:s, s:i}", "session_id", "p1", "wait_ms", 200);
		ck_assert(!e);
		snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s", S(r, "output"));
		if (json_object_get(r, "network_denied")) {
			ck_assert_ptr_null(denied); /* reported once */
			denied = json_incref(json_object_get(r, "network_denied"));
		}
		json_decref(r);
	}
	ck_assert_msg(strstr(out, "blocked by cae network policy: denied.test is not in "
				  "allowed_domains"),
		      "%s", out);
	ck_assert_msg(denied, "no network_denied in process_read");
	ck_assert_str_eq(S(json_array_get(denied, 0), "host"), "denied.test");
	ck_assert_int_eq(I(json_array_get(denied, 0), "port"), 7);
	ck_assert_int_eq(I(json_array_get(denied, 0), "count"), 1);
	json_decref(denied);
	r = call(s, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"env | grep -c _PROXY=; curl -sS -m 10 "
		 "http://other.test:8/; echo\"]}",
		 &e);
	ck_assert_msg(!e && strstr(S(r, "stdout"), "other.test is not in allowed_domains") &&
			  strncmp(S(r, "stdout"), "4\n", 2) == 0,
		      "%s", json_dumps(r, 0));
	json_t *d = json_object_get(r, "network_denied");
	ck_assert_uint_eq(json_array_size(d), 1);
	ck_assert_str_eq(S(json_array_get(d, 0), "host"), "other.test");
	json_decref(r);
	r = pcall(s, "process_kill", &e, "{s:s}", "session_id", "p1");
	json_decref(r);
	close_session(s);
}
END_TEST

START_TEST(process_session_input_output_and_end)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
			  "echo ready; while read l; do echo \"got $l\"; done; echo bye; exit 3",
			  "wait_ms", 10000);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "session_id"), "p1");
	ck_assert_str_eq(S(r, "state"), "running");
	ck_assert(json_is_null(json_object_get(r, "exit_code")));
	ck_assert_str_eq(S(r, "output"), "ready\n");
	ck_assert_int_eq(I(r, "dropped_bytes"), 0);
	json_decref(r);
	/* nothing new: an empty page at once */
	r = pcall(s, "process_read", &e, "{s:s}", "session_id", "p1");
	ck_assert(!e);
	ck_assert_str_eq(S(r, "output"), "");
	json_decref(r);
	r = pcall(s, "process_write", &e, "{s:s, s:s}", "session_id", "p1", "input", "one\n");
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_int_eq(I(r, "written_bytes"), 4);
	json_decref(r);
	_cleanup_free_ char *got = read_until(s, "p1", "got one\n");
	ck_assert_str_eq(got, "got one\n");
	/* listed, running */
	r = pcall(s, "process_list", &e, "{}");
	ck_assert(!e);
	json_t *l0 = json_array_get(json_object_get(r, "sessions"), 0);
	ck_assert_str_eq(S(l0, "session_id"), "p1");
	ck_assert_str_eq(S(l0, "state"), "running");
	ck_assert_int_eq(I(r, "max_per_environment"), 8);
	json_decref(r);
	/* end of input ends it; wait gives the exit code and the rest of the output */
	r = pcall(s, "process_write", &e, "{s:s, s:s, s:b}", "session_id", "p1", "input", "two\n",
		  "close_stdin", 1);
	ck_assert(!e);
	ck_assert(!B(r, "stdin_open"));
	json_decref(r);
	r = pcall(s, "process_wait", &e, "{s:s, s:i}", "session_id", "p1", "timeout_ms", 60000);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "state"), "exited");
	ck_assert_int_eq(I(r, "exit_code"), 3);
	ck_assert_str_eq(S(r, "output"), "got two\nbye\n");
	json_decref(r);
	/* writing to an ended session, and to one that does not exist */
	r = pcall(s, "process_write", &e, "{s:s, s:s}", "session_id", "p1", "input", "x");
	ck_assert(e);
	ck_assert_str_eq(error_code(r), "STDIN_CLOSED");
	json_decref(r);
	const char *bad[] = {"p9", "1", "p0", "p-1", "p1x", "", "p99999999999999999999"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		r = pcall(s, "process_read", &e, "{s:s}", "session_id", bad[i]);
		ck_assert_msg(e && strcmp(error_code(r), "NOT_FOUND") == 0, "%s", bad[i]);
		json_decref(r);
	}
	close_session(s);
}
END_TEST

/* Killing stops the command and everything it started; a session's end (the MCP session's)
 * stops what still runs; the per-environment maximum holds. */
START_TEST(process_session_kill_limit_and_session_end)
{
	cae_session *s = open_session("  sessions:\n    max_per_environment: 2\n");
	bool e;
	json_t *r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
			  "sleep 601.25 & sleep 601.5; wait", "wait_ms", 0);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = pcall(s, "process_start", &e, "{s:s, s:i}", "command", "sleep 602.25", "wait_ms", 0);
	ck_assert(!e);
	json_decref(r);
	/* the processes exist (so that their absence below means something) */
	for (int i = 0; i < 100 && !(host_process_with("601.25") && host_process_with("602.25"));
	     i++)
		usleep(50000);
	ck_assert(host_process_with("601.25") && host_process_with("601.5") &&
		  host_process_with("602.25"));
	r = pcall(s, "process_start", &e, "{s:s}", "command", "true");
	ck_assert(e);
	ck_assert_str_eq(error_code(r), "LIMIT");
	ck_assert_ptr_nonnull(strstr(S(json_object_get(r, "error"), "message"), "2"));
	json_decref(r);
	r = pcall(s, "process_kill", &e, "{s:s}", "session_id", "p1");
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "state"), "killed");
	json_decref(r);
	ck_assert(!host_process_with("601.25") && !host_process_with("601.5"));
	ck_assert(host_process_with("602.25"));
	/* room again */
	r = pcall(s, "process_start", &e, "{s:s, s:i}", "command", "echo again", "wait_ms", 10000);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "output"), "again\n");
	json_decref(r);
	close_session(s);
	ck_assert(!host_process_with("602.25"));
}
END_TEST

/* A signal goes to the command's process group and the session goes on (an interrupt, as a
 * terminal's Ctrl-C sends it); a signal it does not catch ends it; an unknown one is
 * refused; one for an ended session is not sent. */
START_TEST(process_session_signal)
{
	cae_session *s = open_session(NULL);
	bool e;
	json_t *r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
			  "trap 'echo got-int' INT; trap 'echo got-usr1' USR1; echo ready; "
			  "while :; do sleep 1; done",
			  "wait_ms", 0);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	_cleanup_free_ char *ready = read_until(s, "p1", "ready\n");
	ck_assert_str_eq(ready, "ready\n");
	const char *sigs[][2] = {{"INT", "got-int\n"}, {"USR1", "got-usr1\n"}};
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++) {
		r = pcall(s, "process_kill", &e, "{s:s, s:s}", "session_id", "p1", "signal",
			  sigs[i][0]);
		ck_assert_msg(!e, "%s", json_dumps(r, 0));
		ck_assert(B(r, "signal_sent"));
		json_decref(r);
		_cleanup_free_ char *got = read_until(s, "p1", sigs[i][1]);
		ck_assert_msg(strstr(got, sigs[i][1]), "%s: %s", sigs[i][0], got);
		/* caught: it runs on */
		r = pcall(s, "process_list", &e, "{}");
		ck_assert_str_eq(S(json_array_get(json_object_get(r, "sessions"), 0), "state"),
				 "running");
		json_decref(r);
	}
	const char *bad[] = {"\"STOP\"", "\"SIGINT\"", "\"int\"", "2", "null", "\"\""};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char args[128];
		snprintf(args, sizeof(args), "{\"session_id\": \"p1\", \"signal\": %s}", bad[i]);
		r = call(s, "process_kill", args, &e);
		ck_assert_msg(e && strcmp(error_code(r), "INVALID_ARGUMENT") == 0, "%s", bad[i]);
		json_decref(r);
	}
	/* TERM, not caught, ends the shell; the session says so */
	r = pcall(s, "process_kill", &e, "{s:s, s:s}", "session_id", "p1", "signal", "TERM");
	ck_assert_msg(!e && B(r, "signal_sent"), "%s", json_dumps(r, 0));
	json_decref(r);
	r = pcall(s, "process_wait", &e, "{s:s, s:i}", "session_id", "p1", "timeout_ms", 60000);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "state"), "exited");
	ck_assert_int_eq(I(r, "signal"), SIGTERM);
	json_decref(r);
	r = pcall(s, "process_kill", &e, "{s:s, s:s}", "session_id", "p1", "signal", "INT");
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert(!B(r, "signal_sent"));
	json_decref(r);
	close_session(s);
}
END_TEST

/* Output past the buffer is dropped oldest first and the read says how much; the newest is
 * kept. */
START_TEST(process_session_drops_past_the_buffer)
{
	cae_session *s = open_session("  sessions:\n    buffer_size: 4096\n");
	bool e;
	json_t *r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
			  "head -c 100000 /dev/zero | tr '\\0' a; echo; echo END", "wait_ms", 0);
	ck_assert(!e);
	json_decref(r);
	r = pcall(s, "process_wait", &e, "{s:s, s:i, s:i}", "session_id", "p1", "timeout_ms", 60000,
		  "max_chars", 200000);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "state"), "exited");
	const char *out = S(r, "output");
	size_t len = strlen(out);
	ck_assert_uint_le(len, 4096);
	ck_assert_uint_eq(len + (size_t)I(r, "dropped_bytes"), 100000 + 5);
	ck_assert_str_eq(out + len - 5, "\nEND\n");
	ck_assert(!B(r, "more"));
	json_decref(r);
	/* pages: max_chars cuts after a line; dropped is said once */
	r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
		  "for i in $(seq 1 400); do echo line-$i; done", "wait_ms", 0);
	ck_assert(!e);
	json_decref(r);
	r = pcall(s, "process_wait", &e, "{s:s, s:i, s:i}", "session_id", "p2", "max_chars", 1000,
		  "timeout_ms", 60000);
	ck_assert(!e);
	out = S(r, "output");
	ck_assert_uint_le(strlen(out), 1000);
	ck_assert(out[strlen(out) - 1] == '\n');
	ck_assert(B(r, "more"));
	json_decref(r);
	close_session(s);
}
END_TEST

/* A session never outlives its environment: cleaned up through the session, or removed
 * behind its back (another process, `cae gc`). Also: the policy holds, and secrets are
 * masked. */
START_TEST(process_session_ends_with_its_environment)
{
	cae_session *s = open_session(NULL);
	cae_session_add_secret(s, "sessionsecret1234");
	bool e;
	json_t *r = pcall(s, "process_start", &e, "{s:s}", "command", "sudo ls");
	ck_assert(e);
	ck_assert_str_eq(error_code(r), "DENIED");
	json_decref(r);
	r = pcall(s, "process_start", &e, "{s:s, s:i}", "command",
		  "echo sessionsecret1234; sleep 603.25", "wait_ms", 10000);
	ck_assert(!e);
	ck_assert_str_eq(S(r, "output"), "***\n");
	json_decref(r);
	r = call(s, "environment_cleanup", "{}", &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert(B(r, "removed"));
	json_decref(r);
	ck_assert(!host_process_with("603.25"));
	r = pcall(s, "process_read", &e, "{s:s}", "session_id", "p1");
	ck_assert_str_eq(S(r, "state"), "killed");
	json_decref(r);

	/* removed by another backend object (as another process would) */
	cae_error err = {0};
	ck_assert_msg(cae_session_use_workspace(s, ws, &err) == 0, "%s", err.message);
	r = pcall(s, "process_start", &e, "{s:s, s:i}", "command", "echo started; sleep 604.25",
		  "wait_ms", 30000);
	ck_assert(!e);
	ck_assert_str_eq(S(r, "output"), "started\n");
	json_decref(r);
	cae_backend *other = NULL;
	ck_assert_int_eq(cae_backend_new_named("local", cae_session_config(s), NULL, &other, &err),
			 0);
	ck_assert_msg(cae_backend_cleanup(other, cae_session_current(s), &err) == 0, "%s",
		      err.message);
	cae_backend_free(other);
	r = pcall(s, "process_wait", &e, "{s:s, s:i}", "session_id", "p2", "timeout_ms", 120000);
	ck_assert_msg(strcmp(S(r, "state"), "killed") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	ck_assert(!host_process_with("604.25"));
	close_session(s);
}
END_TEST

/* GET path from 127.0.0.1:port of this host: the response (new), or NULL when nothing
 * answers (the connection refused or closed before a response). */
static char *host_get(int port, const char *path)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return NULL;
	}
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
	ck_assert_int_eq(write(fd, req, (size_t)n), n);
	char *out = calloc(1, 65536);
	size_t len = 0;
	ssize_t k;
	while (len < 65535 && (k = read(fd, out + len, 65535 - len)) > 0)
		len += (size_t)k;
	close(fd);
	if (len == 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* A server a session starts answers the environment's later commands on loopback: they share
 * the sandbox. It is reached from the host through environment_port_forward (the sandbox
 * has no network: the forward goes over the helper's channel), and the forward ends with
 * the session. */
START_TEST(process_session_server_shares_loopback)
{
	cae_session *s = open_session(NULL);
	tu_sh("printf 'served-by-session' >%s/index.html", ws);
	bool e;
	int port = tu_free_port();
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "exec python3 -u -m http.server %d --bind 127.0.0.1 2>&1 | cat",
		 port);
	json_t *r = pcall(s, "process_start", &e, "{s:s, s:i}", "command", cmd, "wait_ms", 0);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	_cleanup_free_ char *banner = read_until(s, "p1", "Serving HTTP");
	ck_assert_msg(strstr(banner, "Serving HTTP"), "%s", banner);
	char get[512];
	snprintf(get, sizeof(get),
		 "{\"command\": \"python3 -c \\\"import urllib.request as u; "
		 "print(u.urlopen('http://127.0.0.1:%d/index.html').read().decode())\\\"\"}",
		 port);
	r = call(s, "command-executor_execute_command", get, &e);
	ck_assert_msg(I(r, "exit_code") == 0, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "stdout"), "served-by-session\n");
	json_decref(r);
	/* from the host: a forward to the session's server */
	r = pcall(s, "environment_port_forward", &e, "{s:s}", "port", "x");
	ck_assert(e);
	json_decref(r);
	r = pcall(s, "environment_port_forward", &e, "{s:i}", "port", port);
	ck_assert_msg(!e && strcmp(S(r, "host"), "127.0.0.1") == 0 && I(r, "host_port") > 0, "%s",
		      json_dumps(r, 0));
	int host_port = (int)I(r, "host_port");
	json_decref(r);
	r = pcall(s, "environment_port_forward", &e, "{s:i}", "port", port);
	ck_assert_int_eq(I(r, "host_port"), host_port); /* the same one again */
	json_decref(r);
	for (int i = 0; i < 3; i++) {
		_cleanup_free_ char *got = host_get(host_port, "/index.html");
		ck_assert_msg(got && strstr(got, " 200 ") && strstr(got, "served-by-session"), "%s",
			      got ? got : "(nothing answered)");
	}
	close_session(s);
	_cleanup_free_ char *after = host_get(host_port, "/index.html");
	ck_assert_msg(!after, "the forward outlived its session: %s", after);
}
END_TEST

/* A second session over the same state directory as the last open_session's (another
 * `cae mcp` of the same instance), with extra_yaml. */
static cae_session *open_peer(const char *extra_yaml)
{
	char yaml[4096];
	snprintf(yaml, sizeof(yaml), "command_executor:\n  backend: local\n  state_dir: %s\n%s",
		 state, extra_yaml ? extra_yaml : "");
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg, yaml, strlen(yaml), "peer.yaml", envp, &err) ==
			  0,
		      "%s", err.message);
	cae_session *s;
	ck_assert_msg(cae_session_new(cfg, NULL, &s, &err) == 0, "%s", err.message);
	return s;
}

static bool env_listed(cae_session *s, const char *uuid)
{
	bool e, found = false;
	json_t *r = call(s, "environment_list", "{}", &e);
	ck_assert(!e);
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(r, "environments"), i, x) found |=
	    strcmp(S(x, "task_uuid"), uuid) == 0;
	json_decref(r);
	return found;
}

/* The error message of r with every occurrence of uuid replaced by "U" (new string). */
static char *message_without(json_t *r, const char *uuid)
{
	const char *m = S(json_object_get(r, "error"), "message");
	ck_assert_ptr_nonnull(m);
	char *out = calloc(1, strlen(m) + 1);
	for (char *o = out; *m;) {
		if (strncmp(m, uuid, strlen(uuid)) == 0) {
			*o++ = 'U';
			m += strlen(uuid);
		} else {
			*o++ = *m++;
		}
	}
	return out;
}

/* The model's tools act on the session's own environments only: another session's is not
 * listed, and cleaning it up or preparing over it is refused in the words used for a uuid
 * nobody has; sharing (sessions.share_environments) lifts that. A prepare over the
 * session's own environment that would lose its uncommitted edit or a running process
 * session is refused naming them, until force. */
START_TEST(sessions_own_their_environments)
{
	char *root = tu_mkdtemp();
	tu_sh("cd %s && mkdir ok && cd ok && " GIT " init -q && echo hi > a.txt && " GIT
	      " add . && " GIT " commit -qm c",
	      root);
	char yaml[4096], args[9000];
	snprintf(yaml, sizeof(yaml), "  local_repo_roots: [%s]\n", root);
	cae_session *a = open_session(yaml);
	cae_session *b = open_peer(yaml);
	bool e;
	snprintf(args, sizeof(args), "{\"task\": {\"uuid\": \"own-a\", \"repo\": \"%s/ok\"}}",
		 root);
	json_t *r = call(a, "environment_prepare", args, &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	ck_assert(env_listed(a, "own-a"));

	/* b sees none of a's, and cannot tell a's uuid from one that does not exist */
	ck_assert(!env_listed(b, "own-a"));
	r = call(b, "environment_cleanup", "{\"task_uuid\": \"own-a\"}", &e);
	ck_assert(e);
	ck_assert_str_eq(error_code(r), "INVALID_ARGUMENT");
	char *m1 = message_without(r, "own-a");
	json_decref(r);
	r = call(b, "environment_cleanup", "{\"task_uuid\": \"nobody-has-it\"}", &e);
	ck_assert(e);
	char *m2 = message_without(r, "nobody-has-it");
	json_decref(r);
	ck_assert_str_eq(m1, m2);
	free(m1);
	free(m2);
	snprintf(args, sizeof(args),
		 "{\"task\": {\"uuid\": \"own-a\", \"repo\": \"%s/ok\"}, \"force\": true}", root);
	r = call(b, "environment_prepare", args, &e);
	ck_assert_msg(e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(error_code(r), "INVALID_ARGUMENT");
	m1 = message_without(r, "own-a");
	ck_assert_msg(strstr(m1, "task U is not one of this session's environments"), "%s", m1);
	free(m1);
	json_decref(r);
	/* a's environment is untouched */
	r = call(a, "exec_command", "{\"cwd\": \".\", \"command\": [\"cat\", \"a.txt\"]}", &e);
	ck_assert_msg(!e && strcmp(S(r, "stdout"), "hi\n") == 0, "%s", json_dumps(r, 0));
	json_decref(r);

	/* a's own re-prepare: refused while it would lose the edit and the running session */
	r = call(a, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"sh\", \"-c\", \"echo edit >> a.txt\"]}", &e);
	ck_assert(!e);
	json_decref(r);
	r = pcall(a, "process_start", &e, "{s:s, s:i}", "command", "sleep 606.25", "wait_ms", 0);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	snprintf(args, sizeof(args), "{\"task\": {\"uuid\": \"own-a\", \"repo\": \"%s/ok\"}}",
		 root);
	r = call(a, "environment_prepare", args, &e);
	ck_assert(e);
	const char *msg = S(json_object_get(r, "error"), "message");
	ck_assert_msg(msg && strstr(msg, "a.txt") && strstr(msg, "1 changed file") &&
			  strstr(msg, "1 running process session") && strstr(msg, "sleep 606.25") &&
			  strstr(msg, "force"),
		      "%s", json_dumps(r, 0));
	/* the caller can act on it: not cae's own failure */
	ck_assert_str_eq(S(json_object_get(r, "error"), "code"), "FAILED_PRECONDITION");
	json_decref(r);
	r = call(a, "exec_command", "{\"cwd\": \".\", \"command\": [\"cat\", \"a.txt\"]}", &e);
	ck_assert_msg(!e && strcmp(S(r, "stdout"), "hi\nedit\n") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	r = pcall(a, "process_read", &e, "{s:s}", "session_id", "p1");
	ck_assert_msg(strcmp(S(r, "state"), "running") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	snprintf(args, sizeof(args),
		 "{\"task\": {\"uuid\": \"own-a\", \"repo\": \"%s/ok\"}, \"force\": true}", root);
	r = call(a, "environment_prepare", args, &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = pcall(a, "process_read", &e, "{s:s}", "session_id", "p1");
	ck_assert_msg(strcmp(S(r, "state"), "killed") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	ck_assert(!host_process_with("606.25"));
	r = call(a, "exec_command", "{\"cwd\": \".\", \"command\": [\"cat\", \"a.txt\"]}", &e);
	ck_assert_msg(!e && strcmp(S(r, "stdout"), "hi\n") == 0, "%s", json_dumps(r, 0));
	json_decref(r);

	/* sharing on: another session of the instance may list and remove it */
	cae_session *c = open_peer("  sessions:\n    share_environments: true\n");
	ck_assert(env_listed(c, "own-a"));
	r = call(c, "environment_cleanup", "{\"task_uuid\": \"own-a\"}", &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	ck_assert(!env_listed(a, "own-a"));
	cae_session_free(c);
	cae_session_free(b);
	close_session(a);
	cae__rm_rf(root);
	free(root);
}
END_TEST

/* environment_snapshot, environment_restore and environment_fork act on the session's own
 * environments only (another session's is refused in the words used for a uuid nobody
 * has); a restore ends the environment's process sessions and says which; a fork is the
 * session's and its current environment. */
START_TEST(snapshot_tools_own_and_restore_ends_sessions)
{
	char *root = tu_mkdtemp();
	tu_sh("cd %s && mkdir ok && cd ok && " GIT " init -q && echo hi > a.txt && " GIT
	      " add . && " GIT " commit -qm c",
	      root);
	char yaml[4096], args[9000];
	snprintf(yaml, sizeof(yaml), "  local_repo_roots: [%s]\n", root);
	cae_session *a = open_session(yaml);
	cae_session *b = open_peer(yaml);
	bool e;
	snprintf(args, sizeof(args), "{\"task\": {\"uuid\": \"snap-a\", \"repo\": \"%s/ok\"}}",
		 root);
	json_t *r = call(a, "environment_prepare", args, &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(a, "environment_snapshot", "{\"name\": \"base\"}", &e);
	ck_assert_msg(!e && S(r, "id") && strcmp(S(r, "name"), "base") == 0, "%s",
		      json_dumps(r, 0));
	json_decref(r);

	/* b may not snapshot, restore or fork a's, and cannot tell it from one nobody has */
	const char *const refused[][2] = {
	    {"environment_snapshot", "{\"task_uuid\": \"@\"}"},
	    {"environment_restore", "{\"task_uuid\": \"@\", \"snapshot\": \"base\"}"},
	    {"environment_fork", "{\"task\": {\"uuid\": \"snap-b\"}, \"from\": {\"task_uuid\": "
				 "\"@\", \"snapshot\": \"base\"}}"},
	    {"environment_fork", "{\"task\": {\"uuid\": \"snap-b\"}, \"from\": {\"task_uuid\": "
				 "\"@\"}}"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		char *m[2];
		const char *uuids[2] = {"snap-a", "nobody-has-it"};
		for (int k = 0; k < 2; k++) {
			/* the template with @ for the uuid */
			const char *at = strchr(refused[i][1], '@');
			snprintf(args, sizeof(args), "%.*s%s%s", (int)(at - refused[i][1]),
				 refused[i][1], uuids[k], at + 1);
			r = call(b, refused[i][0], args, &e);
			ck_assert_msg(e, "%s %s", refused[i][0], json_dumps(r, 0));
			ck_assert_str_eq(error_code(r), "INVALID_ARGUMENT");
			m[k] = message_without(r, uuids[k]);
			json_decref(r);
		}
		ck_assert_str_eq(m[0], m[1]);
		ck_assert_msg(strstr(m[0], "not one of this session's environments"), "%s", m[0]);
		free(m[0]);
		free(m[1]);
	}
	ck_assert(!env_listed(b, "snap-b"));
	/* nor take a's uuid for a fork of its own */
	r = call(a, "environment_fork",
		 "{\"task\": {\"uuid\": \"snap-a\"}, \"from\": {\"snapshot\": \"base\"}}", &e);
	ck_assert_msg(e, "%s", json_dumps(r, 0));
	json_decref(r);

	/* a's restore ends its process session and says so; the file added is gone */
	r = pcall(a, "process_start", &e, "{s:s, s:i}", "command", "sleep 707.25", "wait_ms", 0);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(a, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"sh\", \"-c\", \"echo x > added && echo y >> "
		 "a.txt\"]}",
		 &e);
	ck_assert(!e);
	json_decref(r);
	r = call(a, "environment_restore", "{\"snapshot\": \"base\"}", &e);
	ck_assert_msg(!e && S(r, "sessions_ended") &&
			  strstr(S(r, "sessions_ended"), "sleep 707.25"),
		      "%s", json_dumps(r, 0));
	json_decref(r);
	r = pcall(a, "process_read", &e, "{s:s}", "session_id", "p1");
	ck_assert_msg(strcmp(S(r, "state"), "killed") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	ck_assert(!host_process_with("707.25"));
	r = call(a, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"sh\", \"-c\", \"ls; cat a.txt\"]}", &e);
	ck_assert_msg(!e && strcmp(S(r, "stdout"), "a.txt\nhi\n") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	/* the text editor works on the restored files, and commands see what it writes */
	r = call(a, "text_editor",
		 "{\"command\": \"create\", \"path\": \"/workspace/project/ed.txt\", "
		 "\"file_text\": \"edited\\n\"}",
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(a, "exec_command", "{\"cwd\": \".\", \"command\": [\"cat\", \"ed.txt\"]}", &e);
	ck_assert_msg(!e && strcmp(S(r, "stdout"), "edited\n") == 0, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(a, "exec_command", "{\"cwd\": \".\", \"command\": [\"rm\", \"ed.txt\"]}", &e);
	json_decref(r);

	/* a's fork is a's (and current), not b's */
	r = call(a, "environment_fork",
		 "{\"task\": {\"uuid\": \"snap-f\"}, \"from\": {\"snapshot\": \"base\"}}", &e);
	ck_assert_msg(
	    !e && strcmp(S(json_object_get(r, "forked_from"), "task_uuid"), "snap-a") == 0 &&
		!json_object_get(r, "host_path"),
	    "%s", json_dumps(r, 0));
	json_decref(r);
	ck_assert(env_listed(a, "snap-f"));
	ck_assert(!env_listed(b, "snap-f"));
	/* environment_list shows each environment's snapshots */
	r = call(a, "environment_list", "{}", &e);
	size_t i;
	json_t *en;
	int seen = 0;
	json_array_foreach(json_object_get(r, "environments"), i, en)
	{
		json_t *sn = json_object_get(en, "snapshots");
		if (strcmp(S(en, "task_uuid"), "snap-a") == 0) {
			ck_assert_msg(json_array_size(sn) == 1 &&
					  strcmp(S(json_array_get(sn, 0), "name"), "base") == 0,
				      "%s", json_dumps(r, 0));
			seen++;
		} else if (strcmp(S(en, "task_uuid"), "snap-f") == 0) {
			ck_assert_uint_eq(json_array_size(sn), 0);
			seen++;
		}
	}
	ck_assert_int_eq(seen, 2);
	json_decref(r);
	r = call(a, "exec_command",
		 "{\"cwd\": \".\", \"command\": [\"sh\", \"-c\", \"echo f > "
		 "only-fork; ls\"]}",
		 &e);
	ck_assert_msg(!e && strcmp(S(r, "stdout"), "a.txt\nonly-fork\n") == 0, "%s",
		      json_dumps(r, 0));
	json_decref(r);
	r = call(b, "environment_cleanup", "{\"task_uuid\": \"snap-f\"}", &e);
	ck_assert(e);
	json_decref(r);
	r = call(a, "environment_cleanup", "{\"task_uuid\": \"snap-f\"}", &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(a, "environment_cleanup", "{\"task_uuid\": \"snap-a\"}", &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	cae_session_free(b);
	close_session(a);
	cae__rm_rf(root);
	free(root);
}
END_TEST

/* ---- text_editor_mcp.mode: mcp ---- */

#define MCP_SERVER CAE_SOURCE_ROOT "/tests/data/editor-mcp/server.py"

/* A session whose editor is tests/data/editor-mcp/server.py run in the local sandbox (copied
 * into the workspace, where commands see it) in the given mode; calls are logged to
 * .calls in the workspace. */
static cae_session *open_mcp_session(const char *mode, const char *ce_yaml, const char *more_yaml)
{
	char yaml[2048];
	snprintf(yaml, sizeof(yaml),
		 "%stext_editor_mcp:\n  mode: mcp\n  mcp_server:\n    command: [python3, "
		 "/workspace/project/.ed.py, %s, /workspace/project/.calls]\n%s",
		 ce_yaml ? ce_yaml : "", mode, more_yaml ? more_yaml : "    timeout: 20\n");
	cae_session *s = open_session(yaml);
	tu_sh("cp %s %s/.ed.py", MCP_SERVER, ws);
	return s;
}

/* The calls that reached the server (the .calls log), "" when none did. */
static char *server_calls(void)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/.calls", ws);
	char *text = NULL;
	size_t n = 0;
	if (cae__read_file(AT_FDCWD, path, 1 << 20, &text, &n) < 0)
		return strdup("");
	return text;
}

/* The content of a file of the workspace. */
static char *ws_file(const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", ws, name);
	char *text = NULL;
	size_t n = 0;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 1 << 20, &text, &n), 0);
	return text;
}

static char *ed_output(json_t *r)
{
	const char *o = S(r, "output");
	if (o)
		return strdup(o);
	return json_dumps(r, 0);
}

/* The text editor through an MCP stdio server run in the environment: every command reaches
 * the server with its path made absolute under the workspace and its result comes back in
 * the tool's shape (the npm server's JSON unwrapped), masked; a path outside the workspace or
 * under a protected path is refused before it reaches the server; the split tool form; the
 * native editor stays the default (before: mode mcp was refused at load). */
START_TEST(editor_mcp_server_forwards_and_confines)
{
	cae_session *s = open_mcp_session("ok", "  protected_paths: [.git/hooks, secret]\n", NULL);
	ck_assert_int_eq(cae_session_add_secret(s, "tok-mcp-0123456789"), 0);
	/* a view waits for the server: never run on the MCP reader thread */
	json_t *view = json_pack("{s:s, s:s}", "command", "view", "path", "a");
	ck_assert(!cae_session_call_is_quick(s, "text_editor", view));
	ck_assert(!cae_session_call_is_quick(s, "text_editor_view", view));
	json_decref(view);
	bool e;
	json_t *r = call(s, "text_editor",
			 "{\"command\": \"create\", \"path\": \"pkg/a.py\", \"file_text\": "
			 "\"a = 1\\nb = 2\\n\"}",
			 &e);
	/* pkg/ does not exist: the server's own error comes back as the tool's error */
	ck_assert_msg(e, "%s", json_dumps(r, 0));
	char *o = ed_output(r);
	ck_assert_msg(strstr(o, "No such file") != NULL, "%s", o);
	free(o);
	json_decref(r);
	tu_sh("mkdir %s/pkg", ws);
	r = call(s, "text_editor",
		 "{\"command\": \"create\", \"path\": \"pkg/a.py\", \"file_text\": \"a = 1\\nb = "
		 "2\\n\"}",
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "command"), "create");
	ck_assert_str_eq(S(r, "path"), "/workspace/project/pkg/a.py");
	json_decref(r);
	r = call(s, "text_editor",
		 "{\"command\": \"str_replace\", \"path\": \"/workspace/project/pkg/a.py\", "
		 "\"old_str\": \"b = 2\", \"new_str\": \"b = 3 # tok-mcp-0123456789\"}",
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(s, "text_editor",
		 "{\"command\": \"insert\", \"path\": \"pkg/a.py\", \"insert_line\": 0, "
		 "\"new_str\": \"# top\"}",
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	/* a view through the server, masked like every tool result */
	r = call(s, "text_editor",
		 "{\"command\": \"view\", \"path\": \"pkg/a.py\", \"view_range\": [1, -1]}", &e);
	ck_assert(!e);
	o = ed_output(r);
	ck_assert_str_eq(o, "     1\t# top\n     2\ta = 1\n     3\tb = 3 # ***\n     4\t");
	free(o);
	json_decref(r);
	char *text = ws_file("pkg/a.py");
	ck_assert_str_eq(text, "# top\na = 1\nb = 3 # tok-mcp-0123456789\n");
	free(text);
	r = call(s, "text_editor", "{\"command\": \"undo_edit\", \"path\": \"pkg/a.py\"}", &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	text = ws_file("pkg/a.py");
	ck_assert_str_eq(text, "a = 1\nb = 3 # tok-mcp-0123456789\n");
	free(text);
	/* confinement: refused here, never sent */
	const char *outside[] = {
	    "{\"command\": \"view\", \"path\": \"../../../etc/passwd\"}",
	    "{\"command\": \"view\", \"path\": \"/etc/passwd\"}",
	    "{\"command\": \"create\", \"path\": \"/workspace/project/../x\", \"file_text\": "
	    "\"x\"}",
	    "{\"command\": \"create\", \"path\": \".GIT/hooks/pre-commit\", \"file_text\": \"x\"}",
	    "{\"command\": \"str_replace\", \"path\": \"secret/k\", \"old_str\": \"a\"}",
	    "{\"command\": \"insert\", \"path\": \"pkg/a.py\"}",
	};
	char *before = server_calls();
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		r = call(s, "text_editor", outside[i], &e);
		ck_assert_msg(e, "%s: %s", outside[i], json_dumps(r, 0));
		json_decref(r);
	}
	char *after = server_calls();
	ck_assert_str_eq(before, after);
	/* what reached the server: absolute paths under the workspace */
	ck_assert_msg(strstr(after, "text_editor create /workspace/project/pkg/a.py\n") &&
			  strstr(after, "text_editor view /workspace/project/pkg/a.py\n") &&
			  strstr(after, "text_editor undo_edit /workspace/project/pkg/a.py\n"),
		      "%s", after);
	free(before);
	free(after);
	/* the native editor is the default: the same call without mode mcp never starts it */
	close_session(s);

	/* a server with the split form: text_editor_<command> */
	s = open_mcp_session("split", NULL, NULL);
	tu_sh("printf 'x\\n' > %s/f.txt", ws);
	r = call(s, "text_editor", "{\"command\": \"view\", \"path\": \"f.txt\"}", &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	o = ed_output(r);
	ck_assert_str_eq(o, "     1\tx\n     2\t");
	free(o);
	json_decref(r);
	after = server_calls();
	ck_assert_str_eq(after, "text_editor_view view /workspace/project/f.txt\n");
	free(after);
	close_session(s);
}
END_TEST

/* A server that answers garbage, an oversized or too deep answer, dies, hangs, never answers
 * initialize, lacks the tool or is not installed: each call fails with a clear error within
 * the configured timeout, and the next call starts a fresh server (the session ends every
 * one: no process or memory left, checked by LeakSanitizer and the sandbox's end). */
START_TEST(editor_mcp_server_faults)
{
	static const struct {
		const char *mode, *yaml, *expect;
	} cases[] = {
	    {"garbage", NULL, "not JSON-RPC: \"Traceback (most recent call last): not JSON\""},
	    {"die", NULL, "ended (exit status 3): editor crashed"},
	    {"hang", "    timeout: 1\n", "did not answer tools/call within 1 s"},
	    {"noinit", "    timeout: 1\n", "did not answer initialize within 1 s"},
	    {"huge", "    timeout: 20\n  max_file_size: 1m\n", "answer is longer than"},
	    {"deep", NULL, "not JSON-RPC"},
	    {"ok", "    timeout: 20\n    tool: str_replace_editor\n",
	     "has no tool str_replace_editor (text_editor_mcp.mcp_server.tool); it has: "
	     "text_editor"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cae_session *s = open_mcp_session(cases[i].mode, NULL, cases[i].yaml);
		tu_sh("printf 'x\\n' > %s/f.txt", ws);
		for (int round = 0; round < 2; round++) {
			bool e;
			json_t *r = call(s, "text_editor",
					 "{\"command\": \"view\", \"path\": \"f.txt\"}", &e);
			ck_assert_msg(e, "%s: %s", cases[i].mode, json_dumps(r, 0));
			const char *m = json_string_value(
			    json_object_get(json_object_get(r, "error"), "message"));
			ck_assert_msg(m && strstr(m, cases[i].expect), "%s: %s", cases[i].mode,
				      json_dumps(r, 0));
			json_decref(r);
		}
		char *calls = server_calls();
		/* the second round reached a new server (none for the missing tool) */
		size_t n = 0;
		for (char *p = calls; (p = strchr(p, '\n')); p++)
			n++;
		ck_assert_msg(
		    n == (strcmp(cases[i].mode, "ok") == 0 || strcmp(cases[i].mode, "noinit") == 0
			      ? 0
			      : 2),
		    "%s: %s", cases[i].mode, calls);
		free(calls);
		close_session(s);
	}
	/* a program the environment does not have */
	cae_session *s = open_session("text_editor_mcp:\n  mode: mcp\n  mcp_server:\n    command: "
				      "[no-such-editor-server]\n");
	bool e;
	json_t *r = call(s, "text_editor", "{\"command\": \"view\", \"path\": \".\"}", &e);
	ck_assert(e);
	char *d = json_dumps(r, 0);
	ck_assert_msg(strstr(d, "no-such-editor-server") && strstr(d, "not found"), "%s", d);
	free(d);
	json_decref(r);
	close_session(s);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("tools");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, exec_command_echo_hello);
	tcase_add_test(tc, exec_command_invalid_arguments);
	tcase_add_test(tc, exec_command_not_directory);
	tcase_add_loop_test(tc, exec_command_not_found, 0, 2);
	tcase_add_test(tc, exec_command_timeout_keeps_output);
	tcase_add_test(tc, exec_command_truncates_chars);
	tcase_add_test(tc, exec_command_stdin_and_env);
	tcase_add_test(tc, output_kept_whole_past_nul_bytes);
	tcase_add_test(tc, execute_command_semantics);
	tcase_add_test(tc, execute_command_policy_denies_before_running);
	tcase_add_test(tc, execute_command_redacts_secrets_and_caps);
	tcase_add_test(tc, no_environment_is_an_error);
	tcase_add_test(tc, environment_prepare_repo_rules);
	tcase_add_test(tc, model_repo_classes);
	tcase_add_test(tc, state_dir_hidden_from_errors);
	tcase_add_test(tc, host_paths_hidden_in_place);
	tcase_add_loop_test(tc, secrets_masked_with_or_without_logger, 0, 2);
	tcase_add_test(tc, tool_table_rows);
	tcase_add_test(tc, definitions_exec_command_exact);
	tcase_add_test(tc, definitions_editor_forms_and_platform_filter);
	tcase_add_test(tc, limits_stated_and_enforced);
	tcase_add_test(tc, limits_in_descriptions);
	tcase_add_test(tc, process_session_input_output_and_end);
	tcase_add_test(tc, filtered_network_reports_refusals);
	tcase_add_test(tc, process_session_kill_limit_and_session_end);
	tcase_add_test(tc, process_session_signal);
	tcase_add_test(tc, process_session_drops_past_the_buffer);
	tcase_add_test(tc, process_session_ends_with_its_environment);
	tcase_add_test(tc, process_session_server_shares_loopback);
	tcase_add_test(tc, sessions_own_their_environments);
	tcase_add_test(tc, snapshot_tools_own_and_restore_ends_sessions);
	suite_add_tcase(s, tc);
	/* the text editor as an MCP server's tool */
	tc = tcase_create("editor-mcp");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, editor_mcp_server_forwards_and_confines);
	tcase_add_test(tc, editor_mcp_server_faults);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
