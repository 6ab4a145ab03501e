/* cae mcp: the MCP server on stdin/stdout over a session.
 *
 * Stdout carries only protocol messages: the server writes to a private duplicate of fd 1,
 * and fd 1 itself is pointed at stderr, so that nothing else (a library, a child process
 * that inherits it by mistake) can put a stray byte into the protocol stream. Likewise the
 * protocol input is a private duplicate of fd 0, and fd 0 becomes /dev/null. Logs are JSON
 * lines on stderr. SIGTERM, SIGINT and SIGHUP cancel the running calls and end the server (a
 * second signal ends it at once).
 *
 * Nothing is left behind without a human: once the session is open a collector thread
 * removes stale environments (cae_backend_collector: at once, then every
 * command_executor.cleanup.interval_hours), and with command_executor.cleanup.on_session_end
 * the environments this server prepared are removed when it ends.
 */
#include "cli/cli.h"

#include "cae/backend.h"
#include "cae/mcp.h"
#include "cae/prompt.h"
#include "base/macro.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

enum {
	OPT_MCP_WORKSPACE = CAE_CLI_OPT_FIRST_LOCAL + 100,
	OPT_MCP_TASK,
	OPT_MCP_COMPAT,
	OPT_MCP_FORCE
};

static int usage_mcp(FILE *f)
{
	fprintf(
	    f,
	    "usage: cae mcp [--workspace DIR | --task FILE] [options]\n\n"
	    "Serves the agent tools over the Model Context Protocol: JSON-RPC 2.0, one message\n"
	    "per line on stdin/stdout (protocol versions 2025-11-25, 2025-06-18, 2025-03-26,\n"
	    "2024-11-05). Logs go to stderr (level: CAE_LOG_LEVEL).\n\n"
	    "The current environment, which the command and editor tools act on:\n"
	    "  --workspace DIR    an existing directory, used as is (local backend)\n"
	    "  --task FILE        a task to prepare before serving ({uuid, repo, kind, branch,\n"
	    "                     target_branch, environment}; - = stdin is not allowed here)\n"
	    "  (neither)          none until the environment_prepare tool makes one\n"
	    "  --force            --task: replace an existing environment of the task even when\n"
	    "                     that loses its uncommitted changes (else refused, naming "
	    "them)\n\n"
	    "  --editor-compat    text_editor results in the shape of the npm\n"
	    "                     mcp-server-text-editor: {\"success\",\"message\",\"content\"}\n\n"
	    "options:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

/* The session is opened on a thread of its own while the server already answers
 * `initialize`, `ping` and the prompts: opening it (backend detection, a workspace or a
 * task) can take far longer than the protocol handshake. Tool requests wait for it. The
 * configuration is loaded before serving: the initialize answer's instructions and the
 * prompts are rendered from it. */
struct lazy_session {
	pthread_mutex_t lock;
	pthread_cond_t ready_cv;
	bool ready;
	cae_session *s;
	int r;
	cae_error err;
	cae_config *cfg; /* stolen by the session */
	const char *workspace;
	const char *task_file;
	bool force; /* --force: the --task prepare replaces what it must */
	bool editor_compat;
	cae_backend_collector *collector; /* started once the session is open; NULL: none */
	int cancel[2]; /* readable: the server ended, a --task prepare still running stops */
};

static int prepare_task(cae_session *s, const char *task_file, bool force, int cancel_fd,
			cae_error *err);
static int shutdown_pipe[2] = {-1, -1};

/* Stale environments are collected at once and then every interval_hours (0: never). */
static void start_collector(struct lazy_session *l, cae_session *s)
{
	const cae_config *cfg = cae_session_config(s);
	if (cfg->command_executor.cleanup.interval_hours <= 0)
		return; /* collection is the operator's (cae gc) */
	cae_collector_options o = {
	    .interval_ms = (int64_t)cfg->command_executor.cleanup.interval_hours * 3600 * 1000,
	    .threshold_s = (int64_t)cfg->command_executor.cleanup.stale_threshold_hours * 3600,
	};
	cae_error err;
	cae_error_clear(&err);
	if (cae_backend_collector_start(cae_session_backend(s), &o, &l->collector, &err) < 0)
		cae_log_event(cae_cli_log(), CAE_LOG_WARN, "mcp.collector_failed", "%s",
			      err.message);
}

static void *open_session_thread(void *arg)
{
	struct lazy_session *l = arg;
	cae_session *s = NULL;
	cae_error err;
	cae_error_clear(&err);
	int r = cae_session_new(TAKE_PTR(l->cfg), cae_cli_log(), &s, &err);
	if (r == 0 && l->editor_compat)
		cae_session_set_editor_compat(s, true);
	if (r == 0 && l->workspace && (r = cae_session_use_workspace(s, l->workspace, &err)) < 0)
		cae_error_prefix(&err, "--workspace %s", l->workspace);
	if (r == 0 && l->task_file &&
	    (r = prepare_task(s, l->task_file, l->force, l->cancel[0], &err)) < 0)
		cae_error_prefix(&err, "--task %s", l->task_file);
	if (r == 0)
		start_collector(l, s);
	if (r < 0) {
		cae_session_free(s);
		s = NULL;
		fprintf(stderr, "cae mcp: %s\n", err.message);
		/* Nothing can be served: end the server. */
		char c = 0;
		ssize_t k = write(shutdown_pipe[1], &c, 1);
		(void)k;
	}
	pthread_mutex_lock(&l->lock);
	l->s = s;
	l->r = r;
	l->err = err;
	l->ready = true;
	pthread_cond_broadcast(&l->ready_cv);
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return fd >= 0 && poll(&p, 1, 0) > 0;
}

/* Waits for the session; a call's cancellation (end of input, say) ends the wait: looked
 * at every 50 ms (the opener signals a condition variable, not an fd). NULL on
 * cancellation with *cancelled set. */
static cae_session *wait_session(struct lazy_session *l, int cancel_fd, bool *cancelled,
				 cae_error *err)
{
	*cancelled = false;
	pthread_mutex_lock(&l->lock);
	while (!l->ready) {
		if (cancel_fd < 0) {
			pthread_cond_wait(&l->ready_cv, &l->lock);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&l->ready_cv, &l->lock, &ts);
		if (!l->ready && readable(cancel_fd)) {
			pthread_mutex_unlock(&l->lock);
			*cancelled = true;
			return NULL;
		}
	}
	cae_session *s = l->s;
	if (!s && err)
		*err = l->err;
	pthread_mutex_unlock(&l->lock);
	return s;
}

static json_t *session_list(void *userdata, bool with_output_schema)
{
	bool cancelled;
	cae_session *s = wait_session(userdata, -1, &cancelled, NULL);
	return s ? cae_session_tool_list(s, with_output_schema) : json_array();
}

static int session_call(void *userdata, const char *name, json_t *args, const cae_call_ctx *ctx,
			cae_tool_result *res, cae_error *err)
{
	cae_error why;
	cae_error_clear(&why);
	bool cancelled;
	cae_session *s = wait_session(userdata, ctx ? ctx->cancel_fd : -1, &cancelled, &why);
	if (cancelled)
		return cae_error_set(err, -ECANCELED, "cancelled while the session was opening");
	/* The cause names the operator's paths (--workspace, --task, the state directory): it
	 * went to the log; the client (the model) is told only that there is no session. */
	if (!s)
		return cae_error_set(
		    err, why.code < 0 ? why.code : -EIO,
		    "the session could not be opened (the cause is in the server's "
		    "log)");
	return cae_session_call_tool(s, name, args, ctx, res, err);
}

/* prompts/get of command-executor: the section of the environment the session prepared, as
 * it went (NULL, the configuration's section, before the session is open or prepares). */
static char *session_prompt(void *userdata, const char *name)
{
	struct lazy_session *l = userdata;
	if (strcmp(name, "command-executor") != 0)
		return NULL;
	pthread_mutex_lock(&l->lock);
	cae_session *s = l->ready ? l->s : NULL;
	pthread_mutex_unlock(&l->lock);
	return s ? cae_session_prompt_command_executor(s) : NULL;
}

/* A call the session declares quick (a text editor view) runs on the reader thread. Not
 * before the session is open: that can take long. */
static bool session_call_is_quick(void *userdata, const char *name, const json_t *args)
{
	struct lazy_session *l = userdata;
	pthread_mutex_lock(&l->lock);
	cae_session *s = l->ready ? l->s : NULL;
	pthread_mutex_unlock(&l->lock);
	return s && cae_session_call_is_quick(s, name, args);
}

static bool server_log_enabled(void *userdata, const char *level)
{
	cae_log_level lvl = CAE_LOG_INFO;
	(void)userdata;
	(void)cae_log_level_parse(level, &lvl);
	return cae_log_enabled(cae_cli_log(), lvl);
}

static void server_log(void *userdata, const char *level, const char *event, const char *message)
{
	cae_log_level lvl = CAE_LOG_INFO;
	(void)userdata;
	(void)cae_log_level_parse(level, &lvl);
	cae_log_event(cae_cli_log(), lvl, event, "%s", message);
}

static volatile sig_atomic_t signals_seen;

/* The first signal asks the server to cancel its calls and return; a second one, while a
 * tool ignores its cancellation, ends the process at once. */
static void on_signal(int sig)
{
	if (signals_seen++ > 0)
		_exit(128 + sig);
	int saved = errno;
	char c = (char)sig;
	ssize_t k = write(shutdown_pipe[1], &c, 1);
	(void)k;
	errno = saved;
}

static int install_signals(void)
{
	if (pipe2(shutdown_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	int sigs[] = {SIGTERM, SIGINT, SIGHUP};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL) < 0)
			return -errno;
	/* A vanished client is a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* Takes fds 0 and 1 for the protocol: returns private duplicates in *in / *out and points
 * 0 at /dev/null and 1 at stderr. */
static int take_stdio(int *in, int *out)
{
	*in = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
	*out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (*in < 0 || *out < 0)
		return -errno;
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0)
		return -errno;
	int r = dup2(null, STDIN_FILENO) < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0 ? -errno : 0;
	close(null);
	return r;
}

/* The system-prompt sections of cfg, which the server offers as prompts and, the command
 * executor's and the text editor's, as its instructions. */
static int open_prompts(const cae_config *cfg, cae_prompts **out, cae_error *err)
{
	cae_policy *p = NULL;
	if (cfg->command_executor.enabled && !(p = cae_policy_from_config(cfg, err)))
		return err->code < 0 ? err->code : -ENOMEM;
	int r = cae_prompts_new(cfg, p, out, err);
	cae_policy_free(p);
	return r;
}

static int prepare_task(cae_session *s, const char *task_file, bool force, int cancel_fd,
			cae_error *err)
{
	cae_call_ctx ctx = {.cancel_fd = cancel_fd};
	json_t *j = cae_cli_read_json(task_file, err);
	if (!j)
		return -EINVAL;
	cae_task task;
	int r = cae_task_from_json(j, &task, err);
	if (r == 0) {
		json_t *info = NULL;
		r = cae_session_prepare_ex(s, &task,
					   json_string_value(json_object_get(j, "environment")),
					   force, &ctx, &info, err);
		if (r == 0)
			cae_log_fields(cae_cli_log(), CAE_LOG_INFO, "mcp.task_prepared", info,
				       "environment ready for task %s", task.uuid ? task.uuid : "");
		else
			json_decref(info);
		cae_task_clear(&task);
	}
	json_decref(j);
	return r;
}

int cae_cli_mcp(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"workspace", required_argument, NULL, OPT_MCP_WORKSPACE},
	    {"task", required_argument, NULL, OPT_MCP_TASK},
	    {"editor-compat", no_argument, NULL, OPT_MCP_COMPAT},
	    {"force", no_argument, NULL, OPT_MCP_FORCE},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0},
	};
	cae_cli_common c = {0};
	const char *workspace = NULL, *task_file = NULL;
	bool editor_compat = false, force = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_mcp(stdout);
		if (opt == OPT_MCP_WORKSPACE)
			workspace = optarg;
		else if (opt == OPT_MCP_COMPAT)
			editor_compat = true;
		else if (opt == OPT_MCP_TASK)
			task_file = optarg;
		else if (opt == OPT_MCP_FORCE)
			force = true;
		else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_mcp(stderr);
	}
	if (optind < argc || (workspace && task_file)) {
		fprintf(stderr, "cae mcp: %s\n",
			optind < argc ? "unexpected argument"
				      : "--workspace and --task exclude each other");
		return usage_mcp(stderr);
	}
	if (task_file && strcmp(task_file, "-") == 0) {
		fprintf(stderr, "cae mcp: --task -: stdin carries the protocol; give a file\n");
		return 2;
	}

	int in_fd = -1, out_fd = -1;
	int r = take_stdio(&in_fd, &out_fd);
	if (r < 0) {
		fprintf(stderr, "cae mcp: cannot set up stdio: %s\n", strerror(-r));
		return 1;
	}
	if ((r = install_signals()) < 0) {
		fprintf(stderr, "cae mcp: cannot install signal handlers: %s\n", strerror(-r));
		return 1;
	}

	cae_error err;
	cae_error_clear(&err);
	(void)cae_cli_log(); /* created here, before any thread may ask for it */
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0)
		return 1;
	cae_prompts *prompts = NULL;
	if ((r = open_prompts(cfg, &prompts, &err)) < 0) {
		fprintf(stderr, "cae mcp: %s\n", err.message);
		cae_config_free(cfg);
		return 1;
	}
	struct lazy_session lazy = {
	    .lock = PTHREAD_MUTEX_INITIALIZER,
	    .ready_cv = PTHREAD_COND_INITIALIZER,
	    .cfg = cfg,
	    .workspace = workspace,
	    .task_file = task_file,
	    .force = force,
	    .editor_compat = editor_compat,
	};
	if (pipe2(lazy.cancel, O_CLOEXEC | O_NONBLOCK) < 0) {
		fprintf(stderr, "cae mcp: cannot start: %s\n", strerror(errno));
		return 1;
	}
	pthread_t opener;
	if ((r = pthread_create(&opener, NULL, open_session_thread, &lazy)) != 0) {
		fprintf(stderr, "cae mcp: cannot start: %s\n", strerror(r));
		return 1;
	}

	cae_mcp_handler h = {session_list, session_call, &lazy, session_call_is_quick};
	cae_mcp_options o = {
	    .instructions = cae_prompts_instructions(prompts),
	    .prompts = prompts,
	    .prompt_text = session_prompt,
	    .prompt_userdata = &lazy,
	    .shutdown_fd = shutdown_pipe[0],
	    .log = server_log,
	    .log_enabled = server_log_enabled,
	};
	r = cae_mcp_serve(&h, in_fd, out_fd, &o, &err);
	if (r < 0 && r != -EPIPE)
		cae_log_event(cae_cli_log(), CAE_LOG_ERROR, "mcp.error", "%s", err.message);
	/* The server ended (end of input, a signal): a --task prepare still running is
	 * cancelled rather than waited for. */
	ssize_t k = write(lazy.cancel[1], "x", 1);
	(void)k;
	pthread_join(opener, NULL);
	close(lazy.cancel[0]);
	close(lazy.cancel[1]);
	if (lazy.r < 0)
		r = lazy.r;
	cae_backend_collector_stop(lazy.collector);
	if (lazy.s && cae_session_config(lazy.s)->command_executor.cleanup.on_session_end) {
		int removed = 0;
		cae_error cerr;
		cae_error_clear(&cerr);
		int cr = cae_backend_cleanup_prepared(cae_session_backend(lazy.s), &removed, &cerr);
		cae_log_fields(cae_cli_log(), cr < 0 ? CAE_LOG_WARN : CAE_LOG_INFO,
			       "mcp.session_end_cleanup", json_pack("{s:i}", "removed", removed),
			       "%s", cr < 0 ? cerr.message : "");
	}
	cae_session_free(lazy.s);
	cae_config_free(lazy.cfg); /* when the session never took it */
	cae_prompts_free(prompts);
	close(in_fd);
	close(out_fd);
	cae_cli_log_free();
	return r < 0 && r != -EPIPE ? 1 : 0;
}
