/* cae port-forward: a port of an environment reachable on this host's loopback for as long
 * as the command runs (cae_backend_port_forward). */
#include "cli/cli.h"

#include "cae/backend.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

static int usage_port_forward(FILE *f)
{
	fprintf(f,
		"usage: cae port-forward [options] UUID PORT\n\nForwards a port on this host's "
		"127.0.0.1 to PORT on the environment's 127.0.0.1 (whatever its network mode) "
		"and prints {host, host_port, port, task_uuid} once it listens; the forward "
		"lasts until this command is interrupted (SIGINT, SIGTERM) or its standard "
		"input ends. With the local backend the environment is this command's own "
		"sandbox of it: a server started by another cae process (cae mcp's process_start) "
		"is reached with that process's environment_port_forward tool "
		"instead.\n\noptions:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_port_forward(int argc, char **argv)
{
	static const struct option longopts[] = {CAE_CLI_COMMON_LONGOPTS, {0, 0, 0, 0}};
	cae_cli_common c = {0};
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_port_forward(stdout);
		if (!cae_cli_common_option(&c, opt, optarg))
			return usage_port_forward(stderr);
	}
	if (argc - optind != 2)
		return usage_port_forward(stderr);
	const char *uuid = argv[optind];
	char *end = NULL;
	long port = strtol(argv[optind + 1], &end, 10);
	if (!*argv[optind + 1] || *end || port < 1 || port > 65535) {
		fprintf(stderr, "cae: port-forward: PORT must be 1-65535\n");
		return 2;
	}
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	/* blocked before any thread starts: every thread inherits it, sigwait takes them */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	cae_error err;
	cae_error_clear(&err);
	int host_port = 0;
	int r = cae_backend_port_forward(cae_session_backend(s), uuid, (int)port, &host_port, &err);
	if (r < 0) {
		fprintf(stderr, "cae: port-forward: %s\n", err.message);
		cae_session_free(s);
		return 1;
	}
	json_t *j = json_pack("{s:s, s:i, s:i, s:s}", "host", "127.0.0.1", "host_port", host_port,
			      "port", (int)port, "task_uuid", uuid);
	cae_cli_print_json(j);
	json_decref(j);
	fflush(stdout);
	/* until a signal, or the end of standard input (a parent that goes) */
	sigaddset(&set, SIGUSR1);
	pid_t self = getpid();
	pid_t w = fork();
	if (w == 0) {
		char b[256];
		while (read(0, b, sizeof(b)) > 0)
			;
		kill(self, SIGUSR1);
		_exit(0);
	}
	int sig = 0;
	sigwait(&set, &sig);
	if (w > 0)
		kill(w, SIGKILL);
	cae_session_free(s);
	return 0;
}
