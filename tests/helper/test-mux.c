/* The multiplexed helper channel: `cae-helper --stream` (the program from the build tree,
 * CAE_HELPER) on one end of a socket pair, the manager's mux client on the other, as the
 * docker backend uses them through an exec. Runner semantics through the channel, many
 * requests at once, cancellation, the helper's end, confinement of the working directory
 * and `--init` as a PID 1 would run. */
#include "backend/net-handover.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/helper.h"
#include "helper/mux.h"
#include "helper/tun.h"
#include "runner/proctree.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static const char *helper_path(void)
{
	const char *p = getenv("CAE_HELPER");
	ck_assert_msg(p && *p, "CAE_HELPER is not set (run through meson test)");
	return p;
}

struct plink {
	int fd;
};

static ssize_t p_read(void *ctx, char *buf, size_t size)
{
	struct plink *l = ctx;
	ssize_t n = read(l->fd, buf, size);
	if (n < 0)
		return errno == EAGAIN ? -EAGAIN : -errno;
	return n;
}

static int p_write(void *ctx, const void *p, size_t n)
{
	struct plink *l = ctx;
	const char *c = p;
	while (n) {
		ssize_t w = send(l->fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static void p_close(void *ctx)
{
	struct plink *l = ctx;
	close(l->fd);
	free(l);
}

static pid_t helper_pid;
static int stream_fd; /* the manager's end of the last stream opened */

/* Starts `cae-helper --stream` on a socket pair and opens a mux over it. */
static bool mux_netns; /* the next open_mux's helper: a network namespace of its own */

static cae_helper_mux *open_mux(void)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (mux_netns) {
			/* (its loopback up: ports of its own, none of the host's) */
			struct ifreq ifr = {0};
			snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
			int s = -1;
			if (unshare(CLONE_NEWNET) < 0 ||
			    (s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0 ||
			    ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
				_exit(126);
			ifr.ifr_flags |= IFF_UP;
			if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
				_exit(126);
		}
		dup2(sv[1], 0);
		dup2(sv[1], 1);
		execl(helper_path(), "cae-helper", "--stream", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	helper_pid = pid;
	struct plink *l = calloc(1, sizeof(*l));
	l->fd = sv[0];
	stream_fd = sv[0];
	cae_helper_link link = {
	    .fd = sv[0], .read = p_read, .write = p_write, .close = p_close, .ctx = l};
	cae_helper_mux *m = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_helper_mux_open(&link, 10000, &m, &err) == 0, "%s", err.message);
	return m;
}

static void close_mux(cae_helper_mux *m)
{
	cae_helper_mux_close(m);
	int st;
	ck_assert_int_eq(waitpid(helper_pid, &st, 0), helper_pid);
	ck_assert_msg(WIFEXITED(st), "the helper ended by signal %d%s",
		      WIFSIGNALED(st) ? WTERMSIG(st) : 0,
		      WIFSIGNALED(st) && WCOREDUMP(st) ? " (core dumped)" : "");
}

static int run_sh(cae_helper_mux *m, const char *script, int64_t timeout_ms, cae_run_result *r,
		  cae_error *err)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {.argv = argv, .timeout_ms = timeout_ms, .cancel_fd = -1};
	return cae_helper_mux_run(m, &spec, NULL, NULL, r, err);
}

START_TEST(runs_like_the_runner)
{
	cae_helper_mux *m = open_mux();
	cae_run_result r;
	cae_error err = {0};
	ck_assert_int_eq(run_sh(m, "echo out; echo err >&2; exit 3", 10000, &r, &err), 0);
	ck_assert_int_eq(r.exit_code, 3);
	ck_assert_str_eq(r.out, "out\n");
	ck_assert_str_eq(r.err, "err\n");
	cae_run_result_clear(&r);
	/* stdin, cwd, added environment */
	const char *argv[] = {"sh", "-c", "cat; echo \"[$ADDED]\"; pwd", NULL};
	const char *add[] = {"ADDED=yes", NULL};
	cae_run_spec spec = {.argv = argv,
			     .cwd = "/tmp",
			     .stdin_data = "in\n",
			     .stdin_len = 3,
			     .has_stdin = true,
			     .timeout_ms = 10000,
			     .cancel_fd = -1};
	ck_assert_int_eq(cae_helper_mux_run(m, &spec, add, NULL, &r, &err), 0);
	ck_assert_str_eq(r.out, "in\n[yes]\n/tmp\n");
	cae_run_result_clear(&r);
	/* a program that is not there, a cwd that is not a directory */
	const char *none[] = {"no-such-program-xyz", NULL};
	cae_run_spec s2 = {.argv = none, .timeout_ms = 10000, .cancel_fd = -1};
	ck_assert_int_eq(cae_helper_mux_run(m, &s2, NULL, NULL, &r, &err), -ENOENT);
	s2.argv = argv;
	s2.cwd = "/no/such/dir";
	ck_assert_int_eq(cae_helper_mux_run(m, &s2, NULL, NULL, &r, &err), -ENOTDIR);
	/* confinement: the cwd must resolve beneath it, symlinks included */
	char *dir = tu_mkdtemp();
	char in[600], up[600];
	snprintf(in, sizeof(in), "%s/in", dir);
	snprintf(up, sizeof(up), "%s/in/up", dir);
	/* not tu_sh: the runner in this process would end the helper, our child */
	ck_assert_int_eq(mkdir(in, 0755), 0);
	ck_assert_int_eq(symlink("/", up), 0);
	s2.cwd = in;
	ck_assert_int_eq(cae_helper_mux_run(m, &s2, NULL, in, &r, &err), 0);
	cae_run_result_clear(&r);
	s2.cwd = up;
	ck_assert_int_eq(cae_helper_mux_run(m, &s2, NULL, in, &r, &err), -ENOTDIR);
	s2.cwd = dir;
	ck_assert_int_eq(cae_helper_mux_run(m, &s2, NULL, in, &r, &err), -ENOTDIR);
	cae__rm_rf(dir);
	free(dir);
	ck_assert_int_eq(cae_helper_mux_ping(m, 5000, &err), 0);
	close_mux(m);
}
END_TEST

struct par {
	cae_helper_mux *m;
	int i;
	bool ok;
};

static void *par_main(void *arg)
{
	struct par *p = arg;
	char script[64];
	snprintf(script, sizeof(script), "sleep 0.2; echo %d", p->i);
	cae_run_result r;
	cae_error err = {0};
	if (run_sh(p->m, script, 20000, &r, &err) == 0) {
		char want[16];
		snprintf(want, sizeof(want), "%d\n", p->i);
		p->ok = strcmp(r.out, want) == 0;
		cae_run_result_clear(&r);
	}
	return NULL;
}

/* Many commands at once on one stream: each gets its own answer. */
START_TEST(concurrent_requests_get_their_own_answers)
{
	cae_helper_mux *m = open_mux();
	enum { N = 16 };
	pthread_t t[N];
	struct par p[N];
	int64_t t0 = cae__now_ms();
	for (int i = 0; i < N; i++) {
		p[i] = (struct par){.m = m, .i = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, par_main, &p[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(p[i].ok, "request %d", i);
	}
	/* they ran at once, not one after the other (16 x 0.2 s) */
	ck_assert_int_lt(cae__now_ms() - t0, 3200);
	close_mux(m);
}
END_TEST

/* A timeout kills the whole tree, setsid and double forks included, and returns. */
START_TEST(timeout_kills_the_tree)
{
	cae_helper_mux *m = open_mux();
	cae_run_result r;
	cae_error err = {0};
	ck_assert_int_eq(
	    run_sh(m, "setsid sleep 301 & (sleep 302 &) ; sleep 303; echo never", 500, &r, &err),
	    0);
	ck_assert(r.timed_out);
	ck_assert_ptr_null(strstr(r.out, "never"));
	cae_run_result_clear(&r);
	pid_t kids[64];
	ck_assert_uint_eq(cae__proctree_descendants(helper_pid, kids, 64), 0);
	close_mux(m);
}
END_TEST

/* A cancel fd that becomes readable cancels the command; the stream goes on. */
START_TEST(cancel_through_the_stream)
{
	cae_helper_mux *m = open_mux();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	const char *argv[] = {"sleep", "300", NULL};
	cae_run_spec spec = {.argv = argv, .timeout_ms = 60000, .cancel_fd = p[0]};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_int_eq(cae_helper_mux_run(m, &spec, NULL, NULL, &r, &err), 0);
	ck_assert(r.cancelled);
	cae_run_result_clear(&r);
	ck_assert_int_eq(run_sh(m, "echo after", 10000, &r, &err), 0);
	ck_assert_str_eq(r.out, "after\n");
	cae_run_result_clear(&r);
	close(p[0]);
	close(p[1]);
	close_mux(m);
}
END_TEST

struct bg {
	cae_helper_mux *m;
	int r;
	cae_error err;
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	cae_run_result r;
	b->r = run_sh(b->m, "sleep 300", 60000, &r, &b->err);
	if (b->r == 0)
		cae_run_result_clear(&r);
	return NULL;
}

/* The helper killed mid-command: the call says so, and the command does not outlive it
 * for long (it is the helper's child: the test's subreaper collects it). */
START_TEST(helper_killed_mid_command_is_an_error)
{
	cae_helper_mux *m = open_mux();
	struct bg b = {.m = m};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, bg_main, &b), 0);
	for (int i = 0; i < 500; i++) {
		pid_t kids[64];
		if (cae__proctree_descendants(helper_pid, kids, 64) > 0)
			break;
		nanosleep(&(struct timespec){0, 10000000L}, NULL);
	}
	kill(helper_pid, SIGKILL);
	pthread_join(t, NULL);
	ck_assert_int_eq(b.r, -ECONNRESET);
	ck_assert_msg(strstr(b.err.message, "ended during the command") != NULL, "%s",
		      b.err.message);
	ck_assert(!cae_helper_mux_alive(m));
	cae_run_result r;
	cae_error err = {0};
	ck_assert_int_eq(run_sh(m, "true", 1000, &r, &err), -EPIPE);
	cae_helper_mux_close(m);
	waitpid(helper_pid, NULL, 0);
	/* a new stream works */
	m = open_mux();
	ck_assert_int_eq(run_sh(m, "echo again", 10000, &r, &err), 0);
	ck_assert_str_eq(r.out, "again\n");
	cae_run_result_clear(&r);
	close_mux(m);
}
END_TEST

/* Closing the stream ends the helper and every command it runs. */
START_TEST(end_of_stream_ends_everything)
{
	cae_helper_mux *m = open_mux();
	struct bg b = {.m = m};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, bg_main, &b), 0);
	for (int i = 0; i < 500; i++) {
		pid_t kids[64];
		if (cae__proctree_descendants(helper_pid, kids, 64) > 0)
			break;
		nanosleep(&(struct timespec){0, 10000000L}, NULL);
	}
	pid_t kids[64];
	ck_assert_uint_gt(cae__proctree_descendants(helper_pid, kids, 64), 0);
	pid_t sleeper = kids[0];
	/* the manager's end goes away as when its process dies */
	ck_assert_int_eq(shutdown(stream_fd, SHUT_RDWR), 0);
	pthread_join(t, NULL);
	ck_assert_int_lt(b.r, 0);
	int st;
	ck_assert_int_eq(waitpid(helper_pid, &st, 0), helper_pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_int_ne(kill(sleeper, 0), 0);
	cae_helper_mux_close(m);
}
END_TEST

/* Runs `cae-helper --init ARGS` as PID 1 of a new PID namespace with its own /proc (as in
 * a container: --init signals every process it can see). In a forked child: returns its
 * exit status through the child's. what: 0 wait for it; 1 SIGTERM it after a moment; 2
 * start an orphan in the namespace first and check it is killed. */
static int init_in_namespace(const char *lifetime, int what)
{
	pid_t outer = fork();
	ck_assert_int_ge(outer, 0);
	if (outer == 0) {
		if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0)
			_exit(100);
		pid_t pid = fork();
		if (pid < 0)
			_exit(101);
		if (pid == 0) {
			if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
			    mount("proc", "/proc", "proc", 0, NULL) < 0)
				_exit(102);
			if (what == 2 && fork() == 0) {
				/* an orphan: its parent exits at once, it is re-parented to 1 */
				if (fork() == 0) {
					setpgid(0, 0);
					execl("/bin/sleep", "sleep", "300", (char *)NULL);
					_exit(127);
				}
				_exit(0);
			}
			execl(helper_path(), "cae-helper", "--init", "--lifetime", lifetime,
			      (char *)NULL);
			_exit(127);
		}
		if (what == 1) {
			nanosleep(&(struct timespec){0, 300000000L}, NULL);
			kill(pid, SIGTERM);
		}
		if (what == 2) {
			/* within two ticks the orphan is gone, long before the lifetime ends */
			nanosleep(&(struct timespec){2, 500000000L}, NULL);
			pid_t kids[16];
			if (cae__proctree_descendants(pid, kids, 16) != 0)
				_exit(104);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
			_exit(103);
		_exit(WEXITSTATUS(st));
	}
	int st;
	ck_assert_int_eq(waitpid(outer, &st, 0), outer);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* --init: exits by itself after its lifetime without contact; exits 0 on SIGTERM; kills
 * orphans; refuses to run when it is not PID 1. */
START_TEST(init_as_pid1)
{
	int64_t t0 = cae__now_ms();
	ck_assert_int_eq(init_in_namespace("2", 0), CAE_HELPER_INIT_EXPIRED);
	ck_assert_int_ge(cae__now_ms() - t0, 2000);
	ck_assert_int_eq(init_in_namespace("0", 1), 0);
	/* the orphan (sleep 300) is killed: the namespace empties and the lifetime ends it */
	t0 = cae__now_ms();
	ck_assert_int_eq(init_in_namespace("6", 2), CAE_HELPER_INIT_EXPIRED);
	ck_assert_int_lt(cae__now_ms() - t0, 60000);
	/* not PID 1: refused, nothing signalled */
	pid_t pid = fork();
	if (pid == 0) {
		execl(helper_path(), "cae-helper", "--init", "--lifetime", "1", (char *)NULL);
		_exit(127);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 2);
}
END_TEST

/* The network's tunnels (tun.c): the helper listens on its loopback (NET_LISTEN) and hands
 * each connection to the manager; a client that reads nothing fills its own tunnel's window
 * and stalls nobody else: another connection's bytes still pass both ways. Then a port
 * forward's tunnel (TUN_CONNECT) to a server of the helper's loopback. */
struct conns {
	pthread_mutex_t lock;
	int fd[4];
	int n;
};

static int take_conn(void *ud, char kind, int fd)
{
	struct conns *c = ud;
	pthread_mutex_lock(&c->lock);
	if (kind == 'h' && c->n < 4)
		c->fd[c->n++] = fd;
	else
		close(fd);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

struct net_run {
	cae_helper_mux *m;
	const char *script;
	cae_run_result r;
	int rc;
};

static void *net_bg_main(void *arg)
{
	struct net_run *b = arg;
	cae_error err = {0};
	b->rc = run_sh(b->m, b->script, 60000, &b->r, &err);
	return NULL;
}

START_TEST(tunnels_are_flow_controlled)
{
	mux_netns = true;
	cae_helper_mux *m = open_mux();
	mux_netns = false;
	struct conns c = {.lock = PTHREAD_MUTEX_INITIALIZER};
	const char *env[] = {"CAE_NET_TEST=1", NULL};
	cae_error err = {0};
	ck_assert_msg(cae_helper_mux_net_listen(m, 3128, 1080, env, take_conn, &c, &err) == 0, "%s",
		      err.message);
	ck_assert_int_eq(cae_helper_mux_net_listen(m, 3128, 1080, env, take_conn, &c, &err),
			 -EALREADY);
	/* A connects and reads nothing; B gets a greeting, answers it, and ends */
	struct net_run b = {
	    .m = m,
	    .script = "python3 -c '\n"
		      "import os, socket, time\n"
		      "a = socket.create_connection((\"127.0.0.1\", 3128))\n"
		      "time.sleep(0.5)\n"
		      "b = socket.create_connection((\"127.0.0.1\", 3128))\n"
		      "got = b.recv(64)\n"
		      "b.sendall(b\"pong \" + got + os.environ[\"CAE_NET_TEST\"].encode())\n"
		      "b.close()\n"
		      "'"};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, net_bg_main, &b), 0);
	int fds[2] = {-1, -1};
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&c.lock);
		int n = c.n;
		if (n == 2) {
			fds[0] = c.fd[0];
			fds[1] = c.fd[1];
		}
		pthread_mutex_unlock(&c.lock);
		if (n == 2)
			break;
		usleep(50000);
	}
	ck_assert_msg(fds[1] >= 0, "the helper handed over no two connections");
	/* A: as much as will go without the client reading (its window, and the buffers) */
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	static char chunk[65536];
	size_t sent = 0;
	for (int idle = 0; idle < 20;) {
		ssize_t w = send(fds[0], chunk, sizeof(chunk), MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			idle = 0;
		} else {
			idle++;
			usleep(20000);
		}
		ck_assert_msg(sent < (64u << 20),
			      "no bound on what a client that reads nothing gets");
	}
	/* B still passes both ways */
	ck_assert_int_eq(write(fds[1], "ping", 4), 4);
	char got[64] = "";
	size_t n = 0;
	ssize_t k;
	struct timeval tv = {20, 0};
	setsockopt(fds[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (n < sizeof(got) - 1 && (k = read(fds[1], got + n, sizeof(got) - 1 - n)) > 0)
		n += (size_t)k;
	ck_assert_str_eq(got, "pong ping1");
	/* B's tunnel ends (its CLOSE may still be on the way); A's waits */
	for (int i = 0; i < 100 && cae_helper_mux_tunnels(m) != 1; i++)
		usleep(50000);
	ck_assert_int_eq(cae_helper_mux_tunnels(m), 1);
	close(fds[0]);
	close(fds[1]);
	pthread_join(t, NULL);
	ck_assert_msg(b.rc == 0 && b.r.exit_code == 0, "%d %d %s", b.rc, b.r.exit_code, b.r.err);
	cae_run_result_clear(&b.r);

	/* a port forward to a server of the helper's loopback, and one to a closed port */
	b = (struct net_run){.m = m,
			     .script = "python3 -c '\n"
				       "import socket\n"
				       "s = socket.socket(); s.bind((\"127.0.0.1\", 8099)); "
				       "s.listen(1)\n"
				       "c, _ = s.accept(); c.sendall(b\"forwarded\"); c.close()\n"
				       "'"};
	ck_assert_int_eq(pthread_create(&t, NULL, net_bg_main, &b), 0);
	cae_helper_forward *f = NULL, *closed = NULL;
	int hp = 0, hp2 = 0;
	ck_assert_msg(cae_helper_forward_open(m, 8099, &f, &hp, &err) == 0, "%s", err.message);
	ck_assert_int_eq(cae_helper_forward_open(m, 8100, &closed, &hp2, &err), 0);
	char out[64] = "";
	for (int i = 0; i < 100 && !strstr(out, "forwarded"); i++) {
		usleep(50000);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)hp)};
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		memset(out, 0, sizeof(out));
		n = 0;
		while (n < sizeof(out) - 1 && (k = read(fd, out + n, sizeof(out) - 1 - n)) > 0)
			n += (size_t)k;
		close(fd);
	}
	ck_assert_str_eq(out, "forwarded");
	pthread_join(t, NULL);
	cae_run_result_clear(&b.r);
	/* nothing listens on 8100 there: the host's connection ends at once, with nothing */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)hp2)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_le(read(fd, out, sizeof(out)), 0);
	close(fd);
	cae_helper_forward_close(f);
	cae_helper_forward_close(closed);
	close_mux(m);
}
END_TEST

/* NET_LISTEN with a handover socket (src/backend/net-handover.h): the helper sends its two
 * listeners there before it answers; once taken and acknowledged it accepts no more (no
 * connection reaches the stream), and the proxy that took them serves the environment's
 * connections under its policy. */
/* A connection the helper tunnelled after all: counted, and served by the same proxy. */
struct served {
	pthread_mutex_t lock;
	cae_net_proxy *px;
	int n;
};

static int serve_conn(void *ud, char kind, int fd)
{
	(void)kind;
	struct served *sv = ud;
	pthread_mutex_lock(&sv->lock);
	sv->n++;
	pthread_mutex_unlock(&sv->lock);
	return cae_net_proxy_serve_fd(sv->px, fd);
}

START_TEST(listeners_handed_over)
{
	mux_netns = true;
	cae_helper_mux *m = open_mux();
	mux_netns = false;
	char dir[] = "/tmp/cae-test-mux-hand-XXXXXX", path[PATH_MAX];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	const char *allowed[] = {"allowed.example"};
	cae_net_policy_spec spec = {true, allowed, 1, NULL, 0, NULL, 0};
	cae_net_policy *pol = NULL;
	cae_net_proxy *px = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_net_policy_new(&spec, &pol, &err), 0);
	ck_assert_int_eq(cae_net_proxy_new(pol, NULL, NULL, &px, &err), 0);
	cae__net_handover h;
	ck_assert_int_eq(cae__net_handover_open(dir, &h), 0);
	/* (the helper here sees the host's paths) */
	snprintf(path, sizeof(path), "%s/%s", dir, h.name);
	struct served sv = {.lock = PTHREAD_MUTEX_INITIALIZER, .px = px};
	ck_assert_msg(cae_helper_mux_net_listen_handover(m, 3128, 1080, NULL, path, h.token,
							 serve_conn, &sv, &err) == 0,
		      "%s", err.message);
	ck_assert_int_eq(cae__net_handover_take(&h, px, 3128, 1080), 1);
	/* the helper's accepting thread ends on the acknowledgement: from then on the
	 * connections are the proxy's own (the first may race the acknowledgement, and be
	 * tunnelled: served all the same) */
	cae_run_result r;
	char script[512];
	snprintf(script, sizeof(script),
		 "for i in 1 2 3 4 5 6 7 8; do printf 'CONNECT denied.example:443 "
		 "HTTP/1.1\\r\\n\\r\\n' | timeout 5 python3 -c '\n"
		 "import socket, sys\n"
		 "s = socket.create_connection((\"127.0.0.1\", 3128))\n"
		 "s.sendall(sys.stdin.buffer.read())\n"
		 "print(s.recv(200).decode(errors=\"replace\").splitlines()[0])\n"
		 "'; done");
	ck_assert_int_eq(run_sh(m, script, 60000, &r, &err), 0);
	ck_assert_msg(r.exit_code == 0 && strstr(r.out, "403"), "%s %s", r.out, r.err);
	pthread_mutex_lock(&sv.lock);
	int tunnelled = sv.n;
	pthread_mutex_unlock(&sv.lock);
	ck_assert_int_le(tunnelled, 1);
	cae_run_result_clear(&r);
	json_t *d = cae_net_proxy_take_denied(px);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(d, 0), "count")), 8);
	json_decref(d);
	close_mux(m);
	cae_net_proxy_free(px);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* The tunnels' own bookkeeping (helper/tun.h, on both ends of the channel): a tunnel whose
 * socket's reader is gone drops what the peer still sends, and keeps none of it. Run in the
 * ASan build, LeakSanitizer fails this process at its exit if a dropped frame's record is
 * kept (it was: the helper's end, under load, died of that report at close_mux in
 * tunnels_are_flow_controlled). */
static size_t tun_sent;
static pthread_mutex_t tun_sent_lock = PTHREAD_MUTEX_INITIALIZER;

static int count_send(void *ud, char type, uint32_t id, const void *p, size_t n)
{
	(void)ud, (void)id, (void)p;
	pthread_mutex_lock(&tun_sent_lock);
	if (type == CAE_MUX_TUN_DATA)
		tun_sent += n;
	pthread_mutex_unlock(&tun_sent_lock);
	return 0;
}

START_TEST(tunnel_drops_what_its_gone_reader_is_sent)
{
	cae_tun_set *s = cae__tun_set_new(count_send, NULL, 0);
	ck_assert_ptr_nonnull(s);
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(cae__tun_start(s, 7, sv[0], 0, NULL, 0), 0);
	/* the socket's side uses up the tunnel's whole window: the tunnel reads no more */
	static char chunk[65536];
	for (size_t w = 0; w < CAE_TUN_WINDOW;) {
		ssize_t k = write(sv[1], chunk, MIN(sizeof(chunk), CAE_TUN_WINDOW - w));
		ck_assert_int_gt(k, 0);
		w += (size_t)k;
	}
	for (int i = 0; i < 2000; i++) {
		pthread_mutex_lock(&tun_sent_lock);
		size_t n = tun_sent;
		pthread_mutex_unlock(&tun_sent_lock);
		if (n == CAE_TUN_WINDOW)
			break;
		usleep(5000);
	}
	pthread_mutex_lock(&tun_sent_lock);
	ck_assert_uint_eq(tun_sent, CAE_TUN_WINDOW);
	pthread_mutex_unlock(&tun_sent_lock);
	/* its reader goes; the peer goes on sending: the first write fails, the rest is
	 * dropped */
	close(sv[1]);
	for (int i = 0; i < 100; i++) {
		char *body = cae__tun_body(s, 1);
		ck_assert_ptr_nonnull(body);
		body[0] = 'x';
		cae__tun_frame_body(s, CAE_MUX_TUN_DATA, 7, body, 1);
		usleep(2000);
	}
	ck_assert_int_eq(cae__tun_count(s), 1);
	cae__tun_set_free(s);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("helper-mux");
	TCase *tc = tcase_create("mux");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, runs_like_the_runner);
	tcase_add_test(tc, concurrent_requests_get_their_own_answers);
	tcase_add_test(tc, timeout_kills_the_tree);
	tcase_add_test(tc, cancel_through_the_stream);
	tcase_add_test(tc, helper_killed_mid_command_is_an_error);
	tcase_add_test(tc, end_of_stream_ends_everything);
	tcase_add_test(tc, init_as_pid1);
	tcase_add_test(tc, tunnels_are_flow_controlled);
	tcase_add_test(tc, listeners_handed_over);
	tcase_add_test(tc, tunnel_drops_what_its_gone_reader_is_sent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	cae__proctree_init();
	return tu_run(make_suite());
}
