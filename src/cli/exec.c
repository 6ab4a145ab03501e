/* cae exec | run */
#include "cli/cli.h"

#include "base/fs.h"
#include "base/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

enum {
	OPT_CWD = CAE_CLI_OPT_FIRST_LOCAL + 50,
	OPT_TIMEOUT_S,
	OPT_TIMEOUT_MS,
	OPT_DIRECT,
	OPT_EXEC_COMMAND,
	OPT_STDIN,
	OPT_MAX_CHARS,
	OPT_KEEP,
	OPT_EUUID,
};

typedef struct exec_opts {
	const char *cwd;
	const char *timeout_s;
	const char *timeout_ms;
	const char *stdin_file;
	const char *max_chars;
	bool direct;
	bool exec_command;
} exec_opts;

#define EXEC_LONGOPTS                                                                              \
	{"cwd", required_argument, NULL, OPT_CWD},                                                 \
	    {"timeout", required_argument, NULL, OPT_TIMEOUT_S},                                   \
	    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},                               \
	    {"direct", no_argument, NULL, OPT_DIRECT},                                             \
	    {"exec-command", no_argument, NULL, OPT_EXEC_COMMAND},                                 \
	    {"stdin", required_argument, NULL, OPT_STDIN},                                         \
	{                                                                                          \
		"max-output-chars", required_argument, NULL, OPT_MAX_CHARS                         \
	}

#define EXEC_HELP                                                                                  \
	"  --cwd DIR          working directory (default: the project directory)\n"                \
	"  --timeout S        timeout in seconds (command-executor_execute_command)\n"             \
	"  --direct           run argv directly, no shell (exec_command, shell_mode direct)\n"     \
	"  --exec-command     use exec_command with the default shell mode (argv quoted for sh)\n" \
	"  --timeout-ms MS    exec_command timeout (default 30000, at most 120000)\n"              \
	"  --stdin FILE       exec_command: text for standard input (- = stdin)\n"                 \
	"  --max-output-chars N  exec_command: per-stream limit (default 200000)\n"

static int cancel_pipe[2] = {-1, -1};
static volatile sig_atomic_t cancel_signals;

static void on_cancel_signal(int sig)
{
	if (cancel_signals++ > 0)
		_exit(128 + sig);
	int saved = errno;
	ssize_t k = write(cancel_pipe[1], "c", 1);
	(void)k;
	errno = saved;
}

static int install_cancel_signals(void)
{
	if (cancel_pipe[0] < 0 && pipe2(cancel_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	struct sigaction sa = {.sa_handler = on_cancel_signal, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	int sigs[] = {SIGTERM, SIGINT, SIGHUP};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL) < 0)
			return -errno;
	return 0;
}

static int exec_option(exec_opts *e, int opt, const char *arg)
{
	switch (opt) {
	case OPT_CWD:
		e->cwd = arg;
		return 1;
	case OPT_TIMEOUT_S:
		e->timeout_s = arg;
		return 1;
	case OPT_TIMEOUT_MS:
		e->timeout_ms = arg;
		return 1;
	case OPT_DIRECT:
		e->direct = true;
		return 1;
	case OPT_EXEC_COMMAND:
		e->exec_command = true;
		return 1;
	case OPT_STDIN:
		e->stdin_file = arg;
		return 1;
	case OPT_MAX_CHARS:
		e->max_chars = arg;
		return 1;
	}
	return 0;
}

static int add_number(json_t *args, const char *key, const char *text)
{
	char *end;
	double v = strtod(text, &end);
	if (!*text || *end) {
		fprintf(stderr, "cae: %s: not a number: %s\n", key, text);
		return -EINVAL;
	}
	json_object_set_new(args, key, json_real(v));
	return 0;
}

/* Calls the right tool for the options; *result gets the structured result. Returns the
 * exit status the CLI should end with. */
static int run_tool(cae_session *s, const exec_opts *e, int argc, char **argv, json_t **result)
{
	json_t *args = json_object();
	const char *tool;
	if (e->direct || e->exec_command) {
		tool = "exec_command";
		json_t *cmd = json_array();
		for (int i = 0; i < argc; i++)
			json_array_append_new(cmd, json_string(argv[i]));
		json_object_set_new(args, "command", cmd);
		json_object_set_new(args, "cwd", json_string(e->cwd ? e->cwd : "."));
		json_object_set_new(args, "shell_mode",
				    json_string(e->direct ? "direct" : "default"));
		if ((e->timeout_ms && add_number(args, "timeout_ms", e->timeout_ms) < 0) ||
		    (e->max_chars && add_number(args, "max_output_chars", e->max_chars) < 0)) {
			json_decref(args);
			return 2;
		}
		if (e->stdin_file) {
			_cleanup_free_ char *text = NULL;
			size_t len;
			int r =
			    strcmp(e->stdin_file, "-") == 0
				? cae__read_fd(STDIN_FILENO, 64u << 20, &text, &len)
				: cae__read_file(AT_FDCWD, e->stdin_file, 64u << 20, &text, &len);
			if (r < 0) {
				fprintf(stderr, "cae: --stdin %s: %s\n", e->stdin_file,
					strerror(-r));
				json_decref(args);
				return 2;
			}
			json_object_set_new(args, "stdin", json_stringn(text, len));
		}
	} else {
		tool = "command-executor_execute_command";
		/* One argument is taken as the shell command line as is; several are joined with
		 * spaces, as a shell would read them. */
		size_t n = 1;
		for (int i = 0; i < argc; i++)
			n += strlen(argv[i]) + 1;
		_cleanup_free_ char *line = calloc(1, n);
		if (!line) {
			json_decref(args);
			return 1;
		}
		for (int i = 0; i < argc; i++) {
			if (i)
				strncat(line, " ", n - strlen(line) - 1);
			strncat(line, argv[i], n - strlen(line) - 1);
		}
		json_object_set_new(args, "command", json_string(line));
		if (e->cwd)
			json_object_set_new(args, "working_directory", json_string(e->cwd));
		if (e->timeout_s && add_number(args, "timeout_seconds", e->timeout_s) < 0) {
			json_decref(args);
			return 2;
		}
	}
	cae_tool_result res;
	cae_error err;
	cae_error_clear(&err);
	/* SIGINT, SIGTERM or SIGHUP cancel the command (wherever it runs); a second one ends
	 * cae at once (the environment's helper then ends the command when our stream
	 * closes). */
	cae_call_ctx ctx = {.cancel_fd = -1};
	if (install_cancel_signals() == 0)
		ctx.cancel_fd = cancel_pipe[0];
	int r = cae_session_call_tool(s, tool, args, &ctx, &res, &err);
	json_decref(args);
	if (r < 0) {
		cae_cli_error(NULL, &err);
		return 1;
	}
	*result = json_incref(res.structured);
	int status;
	if (cancel_signals > 0) {
		status = 130; /* cancelled by a signal, as a shell reports an interrupted command */
	} else if (res.is_error) {
		status = 1;
	} else {
		json_t *st = res.structured;
		long long code = json_integer_value(json_object_get(st, "exit_code"));
		if (json_is_true(json_object_get(st, "timed_out")))
			status = 124;
		else if (code < 0)
			status = 1;
		else
			status = (int)(code & 0xff);
	}
	cae_tool_result_clear(&res);
	return status;
}

static int usage_exec(FILE *f)
{
	fprintf(
	    f, "usage: cae exec [--uuid UUID] [options] -- COMMAND [ARG...]\n\n"
	       "Runs a command in a prepared environment and prints the result as JSON. By default "
	       "COMMAND is a shell command line for command-executor_execute_command; with "
	       "--direct the words run as argv without a shell (exec_command). The exit status "
	       "is the command's (126 refused by policy, 124 timed out).\n\noptions:\n"
	       "  --uuid UUID        the task (default: $CAE_TASK_UUID, or the only "
	       "environment)\n" EXEC_HELP CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_exec(int argc, char **argv)
{
	static const struct option longopts[] = {EXEC_LONGOPTS,
						 {"uuid", required_argument, NULL, OPT_EUUID},
						 CAE_CLI_COMMON_LONGOPTS,
						 {0, 0, 0, 0}};
	cae_cli_common c = {0};
	exec_opts e = {0};
	const char *uuid = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_exec(stdout);
		if (opt == OPT_EUUID)
			uuid = optarg;
		else if (!cae_cli_common_option(&c, opt, optarg) && !exec_option(&e, opt, optarg))
			return usage_exec(stderr);
	}
	if (optind >= argc)
		return usage_exec(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	_cleanup_free_ char *id = NULL;
	int status = 1;
	if (cae_cli_pick_uuid(s, uuid, "give --uuid UUID", &id) == 0) {
		cae_error err;
		cae_error_clear(&err);
		if (cae_session_set_current(s, id, &err) < 0) {
			cae_cli_error(NULL, &err);
		} else {
			json_t *result = NULL;
			status = run_tool(s, &e, argc - optind, argv + optind, &result);
			if (result)
				cae_cli_print_json(result);
			json_decref(result);
		}
	}
	cae_session_free(s);
	return status;
}

static int usage_run(FILE *f)
{
	fprintf(
	    f,
	    "usage: cae run (--repo URL|PATH | --task FILE | --workspace DIR) [options] -- "
	    "COMMAND [ARG...]\n\nPrepares an environment, runs one command in it, prints "
	    "{environment, result, cleanup} as JSON and removes the environment. The exit "
	    "status is the command's.\n\noptions:\n" TASK_HELP EXEC_HELP
	    "  --keep             do not remove the environment afterwards\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_run(int argc, char **argv)
{
	static const struct option longopts[] = {TASK_LONGOPTS,
						 EXEC_LONGOPTS,
						 {"keep", no_argument, NULL, OPT_KEEP},
						 CAE_CLI_COMMON_LONGOPTS,
						 {0, 0, 0, 0}};
	cae_cli_common c = {0};
	task_opts t = {0};
	exec_opts e = {0};
	bool keep = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_run(stdout);
		if (opt == OPT_KEEP)
			keep = true;
		else if (!cae_cli_common_option(&c, opt, optarg) &&
			 !cae_cli_task_option(&t, opt, optarg) && !exec_option(&e, opt, optarg))
			return usage_run(stderr);
	}
	if (optind >= argc)
		return usage_run(stderr);
	cae_task task;
	_cleanup_free_ char *gen = NULL;
	if (cae_cli_build_task(&t, true, &task, &gen) < 0)
		return 2;
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0) {
		cae_task_clear(&task);
		return 1;
	}
	json_t *info = NULL;
	int status = 1;
	json_t *out = json_object();
	if (cae_cli_do_prepare(s, &t, &task, &info) == 0) {
		json_object_set(out, "environment", info);
		cae_error err;
		cae_error_clear(&err);
		if (t.workspace && cae_session_set_current(s, task.uuid, &err) < 0) {
			cae_cli_error(NULL, &err);
		} else {
			json_t *result = NULL;
			status = run_tool(s, &e, argc - optind, argv + optind, &result);
			json_object_set_new(out, "result", result ? result : json_null());
		}
		if (!keep) {
			int r = cae_session_cleanup(s, task.uuid, &err);
			json_object_set_new(
			    out, "cleanup",
			    r == 0 ? json_pack("{s:b}", "removed", 1)
				   : json_pack("{s:b, s:s}", "removed", 0, "error", err.message));
			if (r < 0 && status == 0)
				status = 1;
		}
		cae_cli_print_json(out);
	}
	json_decref(out);
	json_decref(info);
	cae_task_clear(&task);
	cae_session_free(s);
	return status;
}
