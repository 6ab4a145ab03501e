#include "cae/runner.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "runner/capture.h"
#include "runner/proctree.h"
#include "runner/spawnattr.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/banned.h"

extern char **environ;

#define SCRATCH_SIZE (256u * 1024u)
#define PIPE_SIZE (1024 * 1024)

void cae_run_result_clear(cae_run_result *res)
{
	if (!res)
		return;
	free(res->out);
	free(res->err);
	free(res->warning);
	free(res->network_denied);
	memset(res, 0, sizeof(*res));
}

static const char *env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (const char *const *e = envp; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

int cae_runner_find_program(const char *name, const char *const *envp, char **out)
{
	if (!name || !*name)
		return -ENOENT;
	if (strchr(name, '/')) {
		if (access(name, X_OK) < 0)
			return errno == EACCES ? -EACCES : -ENOENT;
		*out = strdup(name);
		return *out ? 0 : -ENOMEM;
	}
	const char *path = env_get(envp ? envp : (const char *const *)environ, "PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	int ret = -ENOENT;
	const char *p = path;
	size_t nl = strlen(name);
	while (1) {
		const char *colon = strchr(p, ':');
		size_t dl = colon ? (size_t)(colon - p) : strlen(p);
		char *cand = malloc(dl + nl + 3);
		if (!cand)
			return -ENOMEM;
		if (dl == 0) {
			memcpy(cand, "./", 2);
			dl = 2;
		} else {
			memcpy(cand, p, dl);
			cand[dl++] = '/';
		}
		memcpy(cand + dl, name, nl + 1);
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(cand, X_OK) == 0) {
				*out = cand;
				return 0;
			}
			ret = -EACCES;
		}
		free(cand);
		if (!colon)
			break;
		p = colon + 1;
	}
	return ret;
}

/* For the pipe ends we made: their only status flag is the access mode. */
void cae__spawnattr_init_command(posix_spawnattr_t *attr)
{
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_init(attr);
	posix_spawnattr_setsigmask(attr, &none);
	posix_spawnattr_setsigdefault(attr, &all);
	posix_spawnattr_setpgroup(attr, 0);
	posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
					   POSIX_SPAWN_SETSIGDEF);
}

static int set_nonblock(int fd)
{
	return fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ? -errno : 0;
}

/* /dev/null for commands without stdin, opened once per process (a run costs no open). */
static pthread_once_t devnull_once = PTHREAD_ONCE_INIT;
static int devnull_fd = -1;

static void open_devnull(void)
{
	devnull_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Reads what is available on fd into the capture. Returns 1 on EOF, 0 when it would
 * block, -errno on error. */
/* The read buffer: a small one on the stack until a read fills it, then a large one (a
 * command that prints nothing or little costs no allocation). */
struct scratch {
	char *p;
	size_t size;
	char *big;
};

/* The signals waiting on *fd (a byte each, see cae_live_io.signal_fd) go to the process
 * group of pid, the command's; at the descriptor's end (or an error) *fd becomes -1. */
static void forward_signals(int *fd, pid_t pid)
{
	unsigned char b[64];
	ssize_t n = read(*fd, b, sizeof(b));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		*fd = -1;
		return;
	}
	for (ssize_t i = 0; i < n; i++)
		if (b[i] >= 1 && b[i] <= 64)
			(void)kill(-pid, b[i]);
}

/* Where a stream's output goes: its capture, and the live callback when there is one. */
struct sink {
	cae_capture *cap;
	const cae_live_io *live;
	int stream;
};

static int sink_add(const struct sink *s, const char *p, size_t n)
{
	if (s->live && s->live->output)
		s->live->output(s->live->ud, s->stream, p, n);
	return cae__capture_add(s->cap, p, n);
}

static int drain_fd(int fd, const struct sink *cap, struct scratch *sc)
{
	for (int rounds = 0; rounds < 64; rounds++) {
		ssize_t n = read(fd, sc->p, sc->size);
		if (n > 0 && (size_t)n == sc->size && !sc->big &&
		    (sc->big = malloc(SCRATCH_SIZE))) {
			int r = sink_add(cap, sc->p, (size_t)n);
			if (r < 0)
				return r;
			sc->p = sc->big;
			sc->size = SCRATCH_SIZE;
			continue;
		}
		char *scratch = sc->p;
		if (n > 0) {
			int r = sink_add(cap, scratch, (size_t)n);
			if (r < 0)
				return r;
			continue;
		}
		if (n == 0)
			return 1;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return 0;
		return -errno;
	}
	return 0;
}

typedef enum { ST_RUNNING, ST_TERM_SENT, ST_DONE } run_state;

int cae_runner_run(const cae_run_spec *spec, cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!spec || !spec->argv || !spec->argv[0] || !spec->argv[0][0])
		return cae_error_set(err, -EINVAL, "no command to run");
	cae__proctree_init();

	const char *const *envp = spec->envp ? spec->envp : (const char *const *)environ;
	_cleanup_free_ char *prog = NULL;
	int r = cae_runner_find_program(spec->argv[0], envp, &prog);
	if (r == -ENOENT)
		return cae_error_set(err, -ENOENT, "command not found: %s", spec->argv[0]);
	if (r == -EACCES)
		return cae_error_set(err, -ENOENT, "command not executable: %s", spec->argv[0]);
	if (r < 0)
		return cae_error_set(err, r, "cannot resolve %s: %s", spec->argv[0], strerror(-r));
	if (spec->cwd) {
		struct stat st;
		if (stat(spec->cwd, &st) < 0 || !S_ISDIR(st.st_mode))
			return cae_error_set(err, -ENOTDIR, "not a directory: %s", spec->cwd);
	}

	int64_t grace_ms = spec->grace_ms > 0 ? spec->grace_ms : CAE_RUNNER_DEFAULT_GRACE_MS;
	int64_t drain_ms = spec->drain_ms > 0 ? spec->drain_ms : CAE_RUNNER_DEFAULT_DRAIN_MS;
	size_t max_out = spec->max_stdout ? spec->max_stdout : CAE_RUNNER_DEFAULT_MAX_OUTPUT;
	size_t max_err = spec->max_stderr ? spec->max_stderr : CAE_RUNNER_DEFAULT_MAX_OUTPUT;

	int outp[2] = {-1, -1}, errp[2] = {-1, -1}, inp[2] = {-1, -1};
	_cleanup_close_ int out_r = -1, err_r = -1, in_w = -1, pidfd = -1;
	_cleanup_close_ int out_w = -1, err_w = -1, in_r = -1;
	if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		int e = -errno;
		for (int i = 0; i < 2; i++) {
			if (outp[i] >= 0)
				close(outp[i]);
			if (errp[i] >= 0)
				close(errp[i]);
		}
		return cae_error_set(err, e, "pipe: %s", strerror(-e));
	}
	out_r = outp[0], out_w = outp[1], err_r = errp[0], err_w = errp[1];
	int live_in = spec->live ? spec->live->stdin_fd : -1;
	if (live_in < 0 && spec->has_stdin && spec->stdin_len > 0) {
		if (pipe2(inp, O_CLOEXEC) < 0)
			return cae_error_set(err, -errno, "pipe: %s", strerror(errno));
		in_r = inp[0], in_w = inp[1];
		set_nonblock(in_w);
	} else if (live_in < 0) {
		pthread_once(&devnull_once, open_devnull);
		if (devnull_fd < 0)
			return cae_error_set(err, -ENOENT, "cannot open /dev/null");
	}
	(void)fcntl(out_r, F_SETPIPE_SZ, PIPE_SIZE);
	(void)fcntl(err_r, F_SETPIPE_SZ, PIPE_SIZE);
	set_nonblock(out_r);
	set_nonblock(err_r);

	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&fa);
	cae__spawnattr_init_command(&attr);
	posix_spawn_file_actions_adddup2(&fa,
					 live_in >= 0 ? live_in
					 : in_r >= 0  ? in_r
						      : devnull_fd,
					 0);
	posix_spawn_file_actions_adddup2(&fa, out_w, 1);
	posix_spawn_file_actions_adddup2(&fa, err_w, 2);
	if (spec->cwd)
		posix_spawn_file_actions_addchdir_np(&fa, spec->cwd);

	/* Our own thread must not die of SIGPIPE when the command closes its stdin early. */
	sigset_t pipeset, oldset;
	sigemptyset(&pipeset);
	sigaddset(&pipeset, SIGPIPE);
	bool feeding = in_w >= 0;
	if (feeding)
		pthread_sigmask(SIG_BLOCK, &pipeset, &oldset);

	pid_t pid = -1;
	int64_t t0 = cae__now_ns();
	cae__proctree_lock();
	r = posix_spawn(&pid, prog, &fa, &attr, (char *const *)spec->argv, (char *const *)envp);
	if (r == 0)
		cae__proctree_register(pid);
	cae__proctree_unlock();
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (r != 0) {
		if (feeding)
			pthread_sigmask(SIG_SETMASK, &oldset, NULL);
		if (r == ENOENT || r == EACCES || r == ENOEXEC)
			return cae_error_set(err, -ENOENT, "cannot execute %s: %s", spec->argv[0],
					     strerror(r));
		if (r == ENOTDIR)
			return cae_error_set(err, -ENOTDIR, "not a directory: %s",
					     spec->cwd ? spec->cwd : ".");
		return cae_error_set(err, -r, "cannot start %s: %s", spec->argv[0], strerror(r));
	}
	cae__closep(&out_w);
	out_w = -1;
	cae__closep(&err_w);
	err_w = -1;
	cae__closep(&in_r);
	in_r = -1;
	pidfd = pidfd_open_(pid);

	cae_capture cout, cerr;
	cae__capture_init(&cout, max_out, spec->truncate);
	cae__capture_init(&cerr, max_err, spec->truncate);
	char small[16384];
	struct scratch scratch = {.p = small, .size = sizeof(small)};
	const struct sink sout = {&cout, spec->live, 1}, serr = {&cerr, spec->live, 2};
	const char *in_p = spec->stdin_data;
	size_t in_left = in_w >= 0 ? spec->stdin_len : 0;
	run_state st = ST_RUNNING;
	bool exited = false, out_eof = false, err_eof = false;
	int status = 0;
	int64_t deadline_ns = spec->timeout_ms > 0 ? t0 + spec->timeout_ms * 1000000LL : INT64_MAX;
	int64_t kill_at_ns = INT64_MAX, drain_until_ns = INT64_MAX;
	int ret = 0;
	int sig_fd = spec->live && spec->live->signal_fd > 0 ? spec->live->signal_fd : -1;

	while (!(exited && out_eof && err_eof)) {
		int64_t now = cae__now_ns();
		if (st == ST_RUNNING && !exited && now >= deadline_ns) {
			res->timed_out = true;
			cae__proctree_kill_tree(pid, SIGTERM);
			st = ST_TERM_SENT;
			kill_at_ns = now + grace_ms * 1000000LL;
		}
		if (st == ST_TERM_SENT && !exited && now >= kill_at_ns) {
			cae__proctree_kill_tree(pid, SIGKILL);
			st = ST_DONE;
		}
		if (exited && now >= drain_until_ns)
			break; /* something we could not kill still holds a pipe: stop reading */

		struct pollfd pfd[6];
		int n = 0, i_out = -1, i_err = -1, i_in = -1, i_pid = -1, i_cancel = -1, i_sig = -1;
		if (!out_eof)
			pfd[i_out = n++] = (struct pollfd){.fd = out_r, .events = POLLIN};
		if (!err_eof)
			pfd[i_err = n++] = (struct pollfd){.fd = err_r, .events = POLLIN};
		if (in_w >= 0 && in_left > 0)
			pfd[i_in = n++] = (struct pollfd){.fd = in_w, .events = POLLOUT};
		if (!exited && pidfd >= 0)
			pfd[i_pid = n++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
		if (st == ST_RUNNING && spec->cancel_fd >= 0)
			pfd[i_cancel = n++] =
			    (struct pollfd){.fd = spec->cancel_fd, .events = POLLIN};
		if (st == ST_RUNNING && !exited && sig_fd >= 0)
			pfd[i_sig = n++] = (struct pollfd){.fd = sig_fd, .events = POLLIN};

		int64_t next = INT64_MAX;
		if (st == ST_RUNNING && !exited)
			next = deadline_ns;
		if (st == ST_TERM_SENT && !exited)
			next = kill_at_ns;
		if (exited)
			next = drain_until_ns;
		if (pidfd < 0 && !exited)
			next = MIN(next, now + 10 * 1000000LL); /* no pidfd: poll waitpid */
		int pr = poll(pfd, (nfds_t)n, cae__poll_timeout_ms(next, now));
		if (pr < 0 && errno != EINTR) {
			ret = cae_error_set(err, -errno, "poll: %s", strerror(errno));
			cae__proctree_kill_tree(pid, SIGKILL);
			break;
		}
		if (pr <= 0 && !(pidfd < 0 && !exited))
			continue;
		if (i_out >= 0 && pfd[i_out].revents) {
			int d = drain_fd(out_r, &sout, &scratch);
			if (d != 0)
				out_eof = true;
		}
		if (i_err >= 0 && pfd[i_err].revents) {
			int d = drain_fd(err_r, &serr, &scratch);
			if (d != 0)
				err_eof = true;
		}
		if (i_in >= 0 && pfd[i_in].revents) {
			if (pfd[i_in].revents & (POLLERR | POLLHUP)) {
				in_left = 0;
			} else {
				ssize_t w = write(in_w, in_p, MIN(in_left, (size_t)PIPE_SIZE));
				if (w > 0) {
					in_p += w;
					in_left -= (size_t)w;
				} else if (w < 0 && errno != EAGAIN && errno != EINTR) {
					in_left = 0; /* EPIPE: the command stopped reading */
				}
			}
			if (in_left == 0) {
				cae__closep(&in_w);
				in_w = -1;
			}
		}
		if (i_sig >= 0 && pfd[i_sig].revents && !exited)
			forward_signals(&sig_fd, pid);
		if (i_cancel >= 0 && pfd[i_cancel].revents && !exited) {
			res->cancelled = true;
			cae__proctree_kill_tree(pid, SIGTERM);
			st = ST_TERM_SENT;
			kill_at_ns = cae__now_ns() + MIN(grace_ms, 500) * 1000000LL;
		}
		if (!exited && ((i_pid >= 0 && pfd[i_pid].revents) || pidfd < 0)) {
			siginfo_t si;
			memset(&si, 0, sizeof(si));
			/* Peek first: the zombie keeps the pid and process group id reserved while
			 * we kill what the command left behind in its group. */
			if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			    si.si_pid == pid) {
				kill(-pid, SIGKILL);
				if (waitpid(pid, &status, 0) == pid) {
					exited = true;
					res->duration_us = (cae__now_ns() - t0) / 1000;
					cae__proctree_unregister(pid);
					cae__proctree_reap_orphans();
					drain_until_ns = cae__now_ns() + drain_ms * 1000000LL;
					if (in_w >= 0) {
						cae__closep(&in_w);
						in_w = -1;
					}
				}
			}
		}
	}
	if (!exited) {
		/* Error path: make sure nothing is left. */
		cae__proctree_kill_tree(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cae__proctree_unregister(pid);
		cae__proctree_reap_orphans();
		res->duration_us = (cae__now_ns() - t0) / 1000;
	}
	/* Consume a SIGPIPE our writes may have raised, then restore the mask. */
	if (feeding) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipeset, NULL, &zero) > 0)
			;
		pthread_sigmask(SIG_SETMASK, &oldset, NULL);
	}
	free(scratch.big);

	if (WIFEXITED(status)) {
		res->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		res->term_signal = WTERMSIG(status);
		res->exit_code = 128 + res->term_signal;
	}
	res->duration_ms = res->duration_us / 1000;
	res->out_total = cout.total;
	res->err_total = cerr.total;
	res->out = cae__capture_finish(&cout, &res->out_len, &res->out_truncated);
	res->err = cae__capture_finish(&cerr, &res->err_len, &res->err_truncated);
	cae__capture_clear(&cout);
	cae__capture_clear(&cerr);
	if (ret == 0 && (!res->out || !res->err))
		ret = cae_error_set(err, -ENOMEM, "out of memory");
	if (ret < 0)
		cae_run_result_clear(res);
	return ret;
}
