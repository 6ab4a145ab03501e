/* cae config show: the effective config (defaults, file, environment, options) as JSON on
 * stdout, secrets redacted. Exit 0, or 2 with the error on stderr for a bad config. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

static void config_usage(FILE *f)
{
	fprintf(
	    f, "usage: cae config show [options]\n"
	       "\n"
	       "Prints the effective configuration as JSON: built-in defaults, then the config\n"
	       "file, then the environment variables (COMMAND_EXECUTOR_ENABLED, DOCKER_HOST,\n"
	       "EXECUTOR_*, CAE_STATE_DIR, TEXT_EDITOR_MCP_ENABLED, PICOCLAW_WORKER_*, ...), then\n"
	       "the options below. Tokens are shown as \"***\" and credentials in URLs are\n"
	       "redacted. The output is itself a valid config file. Unknown keys are reported on\n"
	       "stderr as warnings. Exit status: 0, or 2 for a bad config.\n"
	       "\n"
	       "options:\n" CAE_CLI_COMMON_HELP);
}

static int config_show(int argc, char **argv)
{
	static const struct option longopts[] = {CAE_CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
	cae_cli_common common = {0};
	int opt;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (cae_cli_common_option(&common, opt, optarg))
			continue;
		if (opt == 'h') {
			config_usage(stdout);
			return 0;
		}
		config_usage(stderr);
		return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "cae config show: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	cae_config *cfg = NULL;
	if (cae_cli_load_config(&common, &cfg) < 0) {
		cae_cli_log_free();
		return 2;
	}
	json_t *j = cae_config_to_json(cfg, true);
	int status = 0;
	if (j) {
		cae_cli_print_json(j);
	} else {
		fprintf(stderr, "cae config show: out of memory\n");
		status = 1;
	}
	json_decref(j);
	cae_config_free(cfg);
	cae_cli_log_free();
	return status;
}

int cae_cli_config(int argc, char **argv)
{
	if (argc < 2) {
		config_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		config_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "show") == 0)
		return config_show(argc - 1, argv + 1);
	fprintf(stderr, "cae config: unknown subcommand '%s'\n", argv[1]);
	config_usage(stderr);
	return 2;
}
