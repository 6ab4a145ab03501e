/* cae-helper: serves commands for the cae manager over the channel on its stdin
 * (see include/cae/helper.h). Not meant to be started by hand. */
#include "cae/helper.h"
#include "helper/enter.h"
#include "helper/mux.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/banned.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: cae-helper [--max-idle SECONDS]\n"
		   "       cae-helper --enter [--cgroup FILE]... [--rlimit NAME=N]... [--stage DIR "
		   "SRC...]\n"
		   "                  [--seccomp FILE] [--user UID:GID] -- PROGRAM ARG...\n"
		   "       cae-helper --stream [--heartbeat SECONDS]\n"
		   "       cae-helper --init [--lifetime SECONDS]\n"
		   "       cae-helper --credential get|store|erase   (git's credential helper)\n"
		   "Runs commands for cae over the unix socket on standard input; exits when the\n"
		   "socket closes (or after SECONDS without a command, when given). --stream\n"
		   "serves the multiplexed channel on stdin/stdout (in a container, through one\n"
		   "exec); --init is a container's PID 1.\n");
}

/* The channel is stdin/stdout; commands get /dev/null as stdin (or theirs) and their own
 * output pipes, and the channel's descriptors are not inherited. */
static int stream_main(int argc, char **argv)
{
	int heartbeat_s = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--heartbeat") == 0 && i + 1 < argc) {
			char *end;
			long s = strtol(argv[++i], &end, 10);
			if (*end || s < 0 || s > 86400) {
				usage(stderr);
				return 2;
			}
			heartbeat_s = (int)s;
		} else {
			usage(stderr);
			return 2;
		}
	}
	int in = fcntl(0, F_DUPFD_CLOEXEC, 3);
	int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
	if (in < 0 || out < 0) {
		fprintf(stderr, "cae-helper: no channel on stdin/stdout: %s\n", strerror(errno));
		return 2;
	}
	(void)syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 0);
		dup2(nul, 1);
		if (nul > 2)
			close(nul);
	}
	signal(SIGPIPE, SIG_IGN);
	int r = cae__helper_serve_stream(in, out, heartbeat_s, false);
	if (r < 0) {
		fprintf(stderr, "cae-helper: %s\n", strerror(-r));
		return 1;
	}
	return 0;
}

/* A stream the manager opens through the channel (cae_helper_open_mux), in this sandbox. */
static int serve_embedded_stream(int fd)
{
	return cae__helper_serve_stream(fd, fd, 0, true);
}

int main(int argc, char **argv)
{
	cae_helper_serve_options o = {.serve_stream = serve_embedded_stream};
	if (argc > 1 && strcmp(argv[1], "--enter") == 0)
		return cae__helper_enter_main(argc, argv);
	/* The helpers that outlive a command (PID 1, a stream, the sandbox's serve loop) run as
	 * the commands' user: non-dumpable, so that no command can ptrace them (freeze PID 1,
	 * take over the channel) nor open their /proc/PID/fd, mem or environ. What they start
	 * is dumpable again: execve resets it (a debugger inside still traces its own
	 * children). The one-shot --credential and --enter (which execs bwrap) need nothing. */
	if (argc <= 1 || strcmp(argv[1], "--credential") != 0) {
		if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
			fprintf(stderr, "cae-helper: PR_SET_DUMPABLE: %s\n", strerror(errno));
			return 2;
		}
	}
	if (argc > 1 && strcmp(argv[1], "--init") == 0)
		return cae__helper_init_main(argc, argv);
	if (argc > 1 && strcmp(argv[1], "--stream") == 0)
		return stream_main(argc, argv);
	if (argc > 1 && strcmp(argv[1], "--credential") == 0)
		return cae__helper_credential_main(argc, argv);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--max-idle") == 0 && i + 1 < argc) {
			char *end;
			long long s = strtoll(argv[++i], &end, 10);
			if (*end || s < 0) {
				usage(stderr);
				return 2;
			}
			o.max_idle_ms = s * 1000;
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--version") == 0) {
			printf("cae-helper %s (protocol %d)\n", CAE_VERSION, CAE_HELPER_PROTOCOL);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	/* The channel leaves fd 0 (commands get their own stdin) and is not inherited. */
	int ctl = fcntl(0, F_DUPFD_CLOEXEC, 3);
	if (ctl < 0) {
		fprintf(stderr, "cae-helper: no channel on stdin: %s\n", strerror(errno));
		return 2;
	}
	/* Whatever else we were given (e.g. by a wrapper) must not reach the commands. */
	(void)syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
	int nul = open("/dev/null", O_RDONLY);
	if (nul >= 0 && nul != 0) {
		dup2(nul, 0);
		close(nul);
	}
	signal(SIGPIPE, SIG_IGN);
	int r = cae_helper_serve(ctl, &o);
	if (r < 0 && r != -ETIMEDOUT) {
		fprintf(stderr, "cae-helper: %s\n", strerror(-r));
		return 1;
	}
	return 0;
}
