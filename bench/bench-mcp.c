/* MCP server benchmarks (issue 4).
 * 1. cold start: spawn `cae mcp --workspace TMP --backend local`, write an initialize
 *    request, time until its answer line arrives (median of 50), next to spawning /bin/true
 *    and reading end of file from its stdout in the same run (target: <= 5 ms; the npm-era
 *    anchor server took 127-241 ms);
 * 2. per call: `text_editor view` of a 51-line file through MCP, measured by the client,
 *    next to the floor of a `ping` round trip on the same connection (interleaved).
 * usage: bench-mcp [BUILD_DIR | PATH_TO_CAE]   (default: the cae next to this program's dir)
 */
#include "base/fs.h"
#include "base/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define INIT_REQUEST                                                                               \
	"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":" \
	"\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench\",\"version\":\"1\"}" \
	"}}\n"

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t percentile(int64_t *v, int n, int pct)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return v[(n - 1) * pct / 100];
}

struct child {
	pid_t pid;
	int in;	 /* its stdin */
	int out; /* its stdout */
	char buf[1 << 16];
	size_t len;
};

static int spawn(struct child *c, char *const argv[])
{
	int pin[2], pout[2];
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	int r = posix_spawn(&c->pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pin[0]);
	close(pout[1]);
	c->in = pin[1];
	c->out = pout[0];
	c->len = 0;
	return -r;
}

static void reap(struct child *c)
{
	close(c->in);
	close(c->out);
	waitpid(c->pid, NULL, 0);
}

/* Reads until a whole line is buffered; returns its length (consumed) or -1. */
static ssize_t read_line(struct child *c)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		if (nl) {
			size_t n = (size_t)(nl - c->buf) + 1;
			memmove(c->buf, nl + 1, c->len - n);
			c->len -= n;
			return (ssize_t)n;
		}
		if (c->len == sizeof(c->buf))
			c->len = 0; /* a huge line: keep reading for its end */
		ssize_t k = read(c->out, c->buf + c->len, sizeof(c->buf) - c->len);
		if (k <= 0)
			return -1;
		c->len += (size_t)k;
	}
}

static int64_t roundtrip(struct child *c, const char *req)
{
	int64_t t = cae__now_ns();
	if (cae__write_all(c->in, req, strlen(req)) < 0 || read_line(c) < 0)
		return -1;
	return cae__now_ns() - t;
}

/* The cae binary: argv[1] (a build directory or the binary), else ../cae from here. */
/* Spawns argv and reads its stdout to end of file: ns, or -1. */
static int64_t spawn_to_eof(char *const argv[])
{
	struct child c;
	int64_t t = cae__now_ns();
	if (spawn(&c, argv) < 0)
		return -1;
	char b[256];
	while (read(c.out, b, sizeof(b)) > 0)
		;
	int64_t d = cae__now_ns() - t;
	reap(&c);
	return d;
}

/* Spawns an MCP server and times until its answer to initialize: ns, or -1. */
static int64_t spawn_to_initialized(char *const argv[])
{
	struct child c;
	int64_t t = cae__now_ns();
	if (spawn(&c, argv) < 0)
		return -1;
	int64_t d =
	    cae__write_all(c.in, INIT_REQUEST, strlen(INIT_REQUEST)) < 0 || read_line(&c) < 0
		? -1
		: cae__now_ns() - t;
	reap(&c);
	return d;
}

static int find_cae(int argc, char **argv, char *buf, size_t size)
{
	int k;
	if (argc > 1) {
		struct stat st;
		bool dir = stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode);
		k = snprintf(buf, size, dir ? "%s/cae" : "%s", argv[1]);
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			return -errno;
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		k = snprintf(buf, size, "%s/../cae", self);
	}
	return k < 0 || (size_t)k >= size ? -ENAMETOOLONG : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	char cae[PATH_MAX];
	if (find_cae(argc, argv, cae, sizeof(cae)) < 0 || access(cae, X_OK) < 0) {
		fprintf(stderr, "bench-mcp: no cae at %s\n", cae);
		return 1;
	}
	char tmpl[] = "/tmp/cae-bench-mcp-XXXXXX";
	char *tmp = mkdtemp(tmpl);
	if (!tmp)
		return 1;
	char ws[PATH_MAX + 16], state[PATH_MAX + 16], file[PATH_MAX + 32];
	snprintf(ws, sizeof(ws), "%s/ws", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	snprintf(file, sizeof(file), "%s/file51.txt", ws);
	cae__mkdir_p(ws, 0755);
	cae__mkdir_p(state, 0755);
	char text[51 * 48];
	size_t tl = 0;
	for (int i = 1; i <= 51; i++)
		tl += (size_t)snprintf(text + tl, sizeof(text) - tl,
				       "line %02d: the quick brown fox jumps over it\n", i);
	cae__write_file_atomic(-100, file, text, tl, 0644, false);

	char a_mcp[] = "mcp", a_ws[] = "--workspace", a_backend[] = "--backend",
	     a_local[] = "local", a_state[] = "--state-dir", a_true[] = "/bin/true";
	char *server[] = {cae, a_mcp, a_ws, ws, a_backend, a_local, a_state, state, NULL};
	char *true_argv[] = {a_true, NULL};

	/* 1. cold start, interleaved with its baselines: /bin/true, `cae version` (the binary's
	 * own start: dynamic loading), and `cae mcp` without --workspace (no environment). */
	char a_version[] = "version";
	char *version_argv[] = {cae, a_version, NULL};
	char *bare[] = {cae, a_mcp, a_backend, a_local, a_state, state, NULL};
	enum { N = 50 };
	int64_t cold[N], nows[N], vers[N], base[N];
	for (int i = 0; i < N; i++) {
		if ((base[i] = spawn_to_eof(true_argv)) < 0 ||
		    (vers[i] = spawn_to_eof(version_argv)) < 0 ||
		    (nows[i] = spawn_to_initialized(bare)) < 0 ||
		    (cold[i] = spawn_to_initialized(server)) < 0) {
			fprintf(
			    stderr,
			    "bench-mcp: a spawn failed, or cae mcp gave no initialize answer\n");
			return 1;
		}
	}
	printf(
	    "mcp.cold_start_ms median=%.2f p90=%.2f target<=5.00 anchor(npm server)=127-241 n=%d\n"
	    "  baselines (same run, medians): spawn /bin/true+read EOF=%.2f, `cae version`=%.2f, "
	    "`cae mcp` without --workspace=%.2f\n",
	    percentile(cold, N, 50) / 1e6, percentile(cold, N, 90) / 1e6, N,
	    percentile(base, N, 50) / 1e6, percentile(vers, N, 50) / 1e6,
	    percentile(nows, N, 50) / 1e6);

	/* 2. per call on one connection */
	const char *ns = getenv("BENCH_N");
	int n = ns ? (int)strtol(ns, NULL, 10) : 500;
	if (n < 1)
		n = 1;
	int64_t *view = calloc((size_t)n, sizeof(int64_t)),
		*ping = calloc((size_t)n, sizeof(int64_t));
	struct child c;
	if (!view || !ping || spawn(&c, server) < 0 || roundtrip(&c, INIT_REQUEST) < 0)
		return 1;
	const char *initialized =
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
	cae__write_all(c.in, initialized, strlen(initialized));
	char req[PATH_MAX + 256];
	snprintf(
	    req, sizeof(req),
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
	    "\"text_editor\",\"arguments\":{\"command\":\"view\",\"path\":\"file51.txt\"}}}\n");
	const char *preq = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
	for (int i = 0; i < n; i++) {
		ping[i] = roundtrip(&c, preq);
		view[i] = roundtrip(&c, req);
		if (ping[i] < 0 || view[i] < 0) {
			fprintf(stderr, "bench-mcp: the server stopped answering\n");
			return 1;
		}
	}
	reap(&c);
	int64_t mv = percentile(view, n, 50), mp = percentile(ping, n, 50);
	printf("mcp.view51_us median=%.1f p90=%.1f floor(ping round trip)=%.1f over_floor=%.1f "
	       "n=%d\n",
	       mv / 1e3, percentile(view, n, 90) / 1e3, mp / 1e3, (mv - mp) / 1e3, n);
	free(view);
	free(ping);
	cae__rm_rf(tmp);
	return 0;
}
