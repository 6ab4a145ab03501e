/* cae-helper's footprint (issue: the helper inside every container): the size of the
 * program and its resident memory while it waits for commands, for the static (musl) build
 * put into containers and the dynamic one, next to `sleep`'s resident memory in the same run
 * (targets: binary <= 1.5 MiB, idle RSS <= 2 MiB).
 * usage: bench-helper [BUILD_DIR] */
#include "cae/helper.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kib = -1;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kib;
}

static long sleep_rss(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		execlp("sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	usleep(200000);
	long kib = rss_kib(pid);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return kib;
}

int main(int argc, char **argv)
{
	const char *build = argc > 1 ? argv[1] : "build";
	long base = sleep_rss();
	const char *names[] = {"cae-helper-static", "cae-helper"};
	for (size_t i = 0; i < 2; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", build, names[i]);
		struct stat st;
		if (stat(path, &st) < 0)
			continue;
		const char *args[] = {path, NULL};
		cae_helper *h;
		cae_error err;
		if (cae_helper_start(args, NULL, 10000, &h, &err) < 0) {
			fprintf(stderr, "bench-helper: %s: %s\n", path, err.message);
			return 1;
		}
		usleep(200000);
		long kib = rss_kib(cae_helper_pid(h));
		cae_helper_stop(h);
		printf("helper.%s size_bytes=%lld (target<=1572864) idle_rss_kib=%ld "
		       "baseline(sleep)=%ld (target<=2048)\n",
		       names[i], (long long)st.st_size, kib, base);
	}
	return 0;
}
