/* cae tools | prompt */
#include "cli/cli.h"

#include "cae/prompt.h"
#include "cae/tools.h"
#include "base/fs.h"
#include "base/macro.h"

#include <errno.h>

#include <fcntl.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

enum {
	OPT_FORMAT = CAE_CLI_OPT_FIRST_LOCAL + 80,
	OPT_SPLIT,
	OPT_ENVTOOLS,
	OPT_PROMPT_ARG,
	OPT_PROMPT_LIST,
	OPT_FILTER,
};

static int usage_tools(FILE *f)
{
	fprintf(
	    f,
	    "usage: cae tools [--format functions|openai|mcp] [--split-editor] "
	    "[--environment-tools] [options]\n"
	    "       cae tools --filter FILE [options]\n\nPrints the tool definitions for an agent "
	    "(empty when the features are disabled).\nWith --filter, reads a tool list (a JSON "
	    "array in any form, or an MCP tools/list result;\nFILE or - for stdin) and prints it "
	    "without the GitHub/GitLab MCP file tools when the\ntext editor is enabled.\n\n"
	    "options:\n"
	    "  --format F         functions (default), openai (the `tools` array) or mcp\n"
	    "  --split-editor     text_editor_<command> functions instead of one text_editor\n"
	    "  --environment-tools  include "
	    "environment_list/prepare/cleanup\n"
	    "  --filter FILE      filter another server's tool list (see "
	    "above)\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

/* cae tools --filter FILE: another server's tool list as the model may be offered it. */
static int filter_tools(const cae_config *cfg, const char *path)
{
	json_error_t je;
	_cleanup_(json_decrefp) json_t *in =
	    strcmp(path, "-") == 0 ? json_loadf(stdin, 0, &je) : json_load_file(path, 0, &je);
	if (!in) {
		fprintf(stderr, "cae tools: %s:%d: %s\n", path, je.line, je.text);
		return 2;
	}
	json_t *list = json_is_object(in) ? json_object_get(in, "tools") : in;
	if (!json_is_array(list)) {
		fprintf(stderr,
			"cae tools: %s: expected a JSON array of tools or an object with "
			"\"tools\"\n",
			path);
		return 2;
	}
	_cleanup_(json_decrefp) json_t *kept = cae_tools_filter_platform_tools(cfg, list);
	if (!kept)
		return 1;
	if (json_is_object(in)) {
		if (json_object_set(in, "tools", kept) < 0)
			return 1;
		cae_cli_print_json(in);
	} else {
		cae_cli_print_json(kept);
	}
	return 0;
}

int cae_cli_tools(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"format", required_argument, NULL, OPT_FORMAT},
	    {"split-editor", no_argument, NULL, OPT_SPLIT},
	    {"environment-tools", no_argument, NULL, OPT_ENVTOOLS},
	    {"filter", required_argument, NULL, OPT_FILTER},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0}};
	cae_cli_common c = {0};
	const char *filter = NULL;
	cae_tools_options o = {
	    .format = CAE_TOOLS_FUNCTIONS, .output_schema = true, .patch_tool = true};
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
		} else if (opt == OPT_FILTER) {
			filter = optarg;
		} else if (!cae_cli_common_option(&c, opt, optarg)) {
			return usage_tools(stderr);
		}
	}
	if (optind < argc)
		return usage_tools(stderr);
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0)
		return 1;
	if (filter) {
		int r = filter_tools(cfg, filter);
		cae_config_free(cfg);
		return r;
	}
	json_t *defs = cae_tools_definitions(cfg, &o);
	cae_cli_print_json(defs);
	json_decref(defs);
	cae_config_free(cfg);
	return 0;
}

static int usage_prompt(FILE *f)
{
	fprintf(f, "usage: cae prompt (command-executor | text-editor | environment-selection) "
		   "[--arg NAME=VALUE]... [options]\n"
		   "       cae prompt --list [options]\n\n"
		   "Prints a system-prompt section; empty when its feature is disabled. `cae mcp` "
		   "serves the same\nsections as MCP prompts (and the first two as its "
		   "instructions).\n"
		   "  command-executor       system_prompt_command_executor.txt, "
		   "{allowed_commands_list} filled\n"
		   "  text-editor            system_prompt_text_editor.txt (editor tool + git "
		   "workflow);\n"
		   "                         --arg branch=NAME fills in <branch_name>\n"
		   "  environment-selection  the planning prompt's environment table\n"
		   "  --list                 the enabled sections with their arguments, as MCP "
		   "prompts/list does\n\noptions:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

/* Adds --arg NAME=VALUE to args; false (after saying why) for a malformed one. */
static bool add_prompt_arg(json_t *args, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg) {
		fprintf(stderr, "cae prompt: --arg %s: expected NAME=VALUE\n", arg);
		return false;
	}
	json_t *v = json_string(eq + 1);
	if (!v) {
		fprintf(stderr, "cae prompt: --arg %s: the value is not UTF-8 text\n", arg);
		return false;
	}
	return json_object_setn_new(args, arg, (size_t)(eq - arg), v) == 0;
}

int cae_cli_prompt(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"arg", required_argument, NULL, OPT_PROMPT_ARG},
	    {"list", no_argument, NULL, OPT_PROMPT_LIST},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0},
	};
	cae_cli_common c = {0};
	_cleanup_(json_decrefp) json_t *args = json_object();
	bool list = false;
	int opt;
	if (!args)
		return 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_prompt(stdout);
		if (opt == OPT_PROMPT_LIST)
			list = true;
		else if (opt == OPT_PROMPT_ARG) {
			if (!add_prompt_arg(args, optarg))
				return 2;
		} else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_prompt(stderr);
	}
	if (list ? optind != argc : optind + 1 != argc)
		return usage_prompt(stderr);
	const char *which = list ? NULL : argv[optind];
	if (which && !cae_prompts_description(which))
		return usage_prompt(stderr);
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0)
		return 1;
	cae_error err;
	cae_error_clear(&err);
	cae_policy *p = NULL;
	cae_prompts *prompts = NULL;
	int r = 0;
	if (cfg->command_executor.enabled && !(p = cae_policy_from_config(cfg, &err)))
		r = err.code < 0 ? err.code : -ENOMEM;
	if (r == 0)
		r = cae_prompts_new(cfg, p, &prompts, &err);
	char *text = NULL;
	if (r == 0 && list) {
		json_t *l = cae_prompts_list(prompts);
		if (l)
			cae_cli_print_json(l);
		else
			r = cae_error_set(&err, -ENOMEM, "out of memory");
		json_decref(l);
	} else if (r == 0) {
		r = cae_prompts_get(prompts, which, args, &text, &err);
	}
	if (text)
		fputs(text, stdout);
	else if (r < 0)
		fprintf(stderr, "cae prompt: %s\n", err.message);
	free(text);
	cae_prompts_free(prompts);
	cae_policy_free(p);
	cae_config_free(cfg);
	return r == 0 ? 0 : r == -EINVAL ? 2 : 1;
}

static int usage_plan(FILE *f)
{
	fprintf(f,
		"usage: cae plan select-env [FILE] [options]\n\nReads a planning response "
		"(JSON, JSON in a Markdown fence, or JSON within prose; FILE or stdin) and prints "
		"{name, requested, reasoning, fallback, warning, comment}: the environment to "
		"prepare, falling back to the default with a warning and a comment for the issue "
		"when the plan names none or an unknown one.\n\noptions:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_plan(int argc, char **argv)
{
	static const struct option longopts[] = {CAE_CLI_COMMON_LONGOPTS, {0, 0, 0, 0}};
	cae_cli_common c = {0};
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_plan(stdout);
		if (!cae_cli_common_option(&c, opt, optarg))
			return usage_plan(stderr);
	}
	if (optind >= argc || strcmp(argv[optind], "select-env") != 0 || argc - optind > 2)
		return usage_plan(stderr);
	const char *file = optind + 1 < argc ? argv[optind + 1] : "-";
	char *text = NULL;
	size_t len = 0;
	int r = strcmp(file, "-") == 0 ? cae__read_fd(STDIN_FILENO, 16u << 20, &text, &len)
				       : cae__read_file(AT_FDCWD, file, 16u << 20, &text, &len);
	if (r < 0) {
		fprintf(stderr, "cae: %s: %s\n", file, strerror(-r));
		return 1;
	}
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0) {
		free(text);
		return 1;
	}
	cae_env_selection sel;
	r = cae_prompt_select_environment(cfg, text, len, &sel);
	free(text);
	if (r == 0) {
		if (sel.warning)
			cae_log_event(cae_cli_log(), CAE_LOG_WARN, "planning.environment_fallback",
				      "%s", sel.warning);
		json_t *j =
		    json_pack("{s:s, s:s?, s:s?, s:b, s:s?, s:s?}", "name", sel.name, "requested",
			      sel.requested, "reasoning", sel.reasoning, "fallback", sel.fallback,
			      "warning", sel.warning, "comment", sel.comment);
		cae_cli_print_json(j);
		json_decref(j);
	}
	cae_env_selection_clear(&sel);
	cae_config_free(cfg);
	return r == 0 ? 0 : 1;
}
