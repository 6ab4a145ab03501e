/* cae tools | prompt */
#include "cli/cli.h"

#include "cae/prompt.h"
#include "cae/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

enum { OPT_FORMAT = CAE_CLI_OPT_FIRST_LOCAL + 80, OPT_SPLIT, OPT_ENVTOOLS };

static int usage_tools(FILE *f)
{
	fprintf(f, "usage: cae tools [--format functions|openai|mcp] [--split-editor] "
		   "[--environment-tools] [options]\n\nPrints the tool definitions for an agent "
		   "(empty when the features are disabled).\n\noptions:\n"
		   "  --format F         functions (default), openai (the `tools` array) or mcp\n"
		   "  --split-editor     text_editor_<command> functions instead of one text_editor\n"
		   "  --environment-tools  include environment_list/prepare/cleanup\n"
		   CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_tools(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "split-editor", no_argument, NULL, OPT_SPLIT },
		{ "environment-tools", no_argument, NULL, OPT_ENVTOOLS },
		CAE_CLI_COMMON_LONGOPTS,
		{ 0, 0, 0, 0 }
	};
	cae_cli_common c = { 0 };
	cae_tools_options o = { .format = CAE_TOOLS_FUNCTIONS, .output_schema = true };
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_tools(stdout);
		if (opt == OPT_FORMAT) {
			if (strcmp(optarg, "functions") == 0)
				o.format = CAE_TOOLS_FUNCTIONS;
			else if (strcmp(optarg, "openai") == 0)
				o.format = CAE_TOOLS_OPENAI;
			else if (strcmp(optarg, "mcp") == 0)
				o.format = CAE_TOOLS_MCP;
			else
				return usage_tools(stderr);
		} else if (opt == OPT_SPLIT) {
			o.split_editor = true;
		} else if (opt == OPT_ENVTOOLS) {
			o.environment_tools = true;
		} else if (!cae_cli_common_option(&c, opt, optarg)) {
			return usage_tools(stderr);
		}
	}
	if (optind < argc)
		return usage_tools(stderr);
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0)
		return 1;
	json_t *defs = cae_tools_definitions(cfg, &o);
	cae_cli_print_json(defs);
	json_decref(defs);
	cae_config_free(cfg);
	return 0;
}

static int usage_prompt(FILE *f)
{
	fprintf(f, "usage: cae prompt command-executor [options]\n\nPrints a system-prompt section "
		   "(empty when its feature is disabled).\n\noptions:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_prompt(int argc, char **argv)
{
	static const struct option longopts[] = { CAE_CLI_COMMON_LONGOPTS, { 0, 0, 0, 0 } };
	cae_cli_common c = { 0 };
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_prompt(stdout);
		if (!cae_cli_common_option(&c, opt, optarg))
			return usage_prompt(stderr);
	}
	if (optind + 1 != argc || strcmp(argv[optind], "command-executor") != 0)
		return usage_prompt(stderr);
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0)
		return 1;
	cae_error err;
	cae_policy *p = NULL;
	int status = 0;
	p = cae_policy_from_config(cfg, &err);
	char *text = p ? cae_prompt_command_executor(cfg, p) : NULL;
	if (text) {
		fputs(text, stdout);
		free(text);
	} else {
		fprintf(stderr, "cae: %s\n", p ? "out of memory" : err.message);
		status = 1;
	}
	cae_policy_free(p);
	cae_config_free(cfg);
	return status;
}
