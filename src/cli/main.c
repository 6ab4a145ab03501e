/* cae: the command-line program. One file per subcommand; this file is the dispatch table. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

static const struct cae_cli_command commands[] = {
    {"env", "list environments (env list)", cae_cli_env},
    {"prepare", "prepare an environment for a task", cae_cli_prepare},
    {"exec", "run a command in an environment", cae_cli_exec},
    {"patch", "apply a patch in an environment (apply_patch)", cae_cli_patch},
    {"edit", "view or edit a file in an environment (text_editor)", cae_cli_edit},
    {"cleanup", "remove a task's environment", cae_cli_cleanup},
    {"port-forward", "reach a port of an environment from this host", cae_cli_port_forward},
    {"gc", "remove stale environments", cae_cli_gc},
    {"snapshot", "record an environment's files (snapshot UUID | list | rm)", cae_cli_snapshot},
    {"restore", "put an environment back as a snapshot recorded it", cae_cli_restore},
    {"fork", "a new environment from an environment or a snapshot", cae_cli_fork},
    {"pool", "the docker warm pool (pool fill | status | drain)", cae_cli_pool},
    {"cache", "remove unused repository mirrors (cache prune)", cae_cli_cache},
    {"run", "prepare, run one command, clean up", cae_cli_run},
    {"tools", "print the tool definitions for an agent", cae_cli_tools},
    {"prompt", "print a system-prompt section", cae_cli_prompt},
    {"plan", "read the planner's environment choice (plan select-env)", cae_cli_plan},
    {"config", "show the effective configuration (config show | reference)", cae_cli_config},
    {"mcp", "serve the tools over MCP (JSON-RPC on stdio)", cae_cli_mcp},
    {"images", "build the language images (images build)", cae_cli_images},
    {"doctor", "say what works on this host, per backend, and what to do", cae_cli_doctor},
    {"version", "print the version", cae_cli_version},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: cae <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nRun 'cae <command> --help' for a command's options.\n");
}

int cae_cli_version(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("cae %s\n", CAE_VERSION);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		return cae_cli_version(argc - 1, argv + 1);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0) {
			int status = commands[i].run(argc - 1, argv + 1);
			cae_cli_log_free();
			return status;
		}
	fprintf(stderr, "cae: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
