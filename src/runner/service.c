#include "cae/runner.h"

#include "runner/proctree.h"
#include "runner/spawnattr.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/macro.h"
#include "base/timeutil.h"

#include "base/banned.h"

extern char **environ;

int cae_runner_service_start(const char *const *argv, const char *const *envp, int stdin_fd,
			     pid_t *pid, cae_error *err)
{
	if (!argv || !argv[0] || !argv[0][0])
		return cae_error_set(err, -EINVAL, "no service to start");
	cae__proctree_init();
	_cleanup_close_ int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0)
		return cae_error_set(err, -errno, "open /dev/null: %s", strerror(errno));
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&fa);
	cae__spawnattr_init_command(&attr);
	posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
	posix_spawn_file_actions_adddup2(&fa, devnull, 1);
	cae__proctree_lock();
	int r = posix_spawn(pid, argv[0], &fa, &attr, (char *const *)argv,
			    (char *const *)(envp ? envp : (const char *const *)environ));
	if (r == 0)
		cae__proctree_register(*pid);
	cae__proctree_unlock();
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (r != 0)
		return cae_error_set(err, r == ENOENT || r == EACCES ? -ENOENT : -r,
				     "cannot start %s: %s", argv[0], strerror(r));
	return 0;
}

int cae_runner_service_stop(pid_t pid, int64_t grace_ms)
{
	int status = 0;
	_cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int64_t until = cae__now_ns() + (grace_ms > 0 ? grace_ms : 0) * 1000000LL;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid || (w < 0 && errno != EINTR))
			break;
		int64_t now = cae__now_ns();
		if (w == 0 && now >= until) {
			cae__proctree_kill_tree(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			break;
		}
		if (pidfd >= 0) {
			struct pollfd p = {.fd = pidfd, .events = POLLIN};
			(void)poll(&p, 1, cae__poll_timeout_ms(until, now));
		} else {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
	}
	cae__proctree_unregister(pid);
	/* What the service left behind was re-parented to us (we are a subreaper). */
	cae__proctree_reap_orphans();
	return status;
}
