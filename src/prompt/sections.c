/* The set of system-prompt sections for one configuration (cae_prompts): their names,
 * descriptions and arguments, the one table that `cae prompt` and the MCP server's
 * prompts/list, prompts/get and instructions all read. */
#include "cae/prompt.h"

#include "prompt/prompt-internal.h"

#include "base/macro.h"
#include "cae/backend.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

/* The longest branch name taken (git's own limit is the file system's name length). */
#define BRANCH_MAX 255

/* A git branch name as `git check-ref-format --branch` would take it, kept to what is
 * safe to show inside the prompt's shell examples: no spaces or control characters, none of
 * ~^:?*[\ or "..", not starting with '-'. */
static const char *check_branch(const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n > BRANCH_MAX)
		return "a branch name is 1 to 255 bytes";
	if (!cae__utf8_is_valid(v, n))
		return "a branch name is UTF-8 text";
	if (v[0] == '-')
		return "a branch name does not start with '-'";
	if (strstr(v, ".."))
		return "a branch name does not contain \"..\"";
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p == 0x7f || strchr("~^:?*[\\", *p))
			return "a branch name has no spaces, control characters or any of ~^:?*[\\";
	return NULL;
}

static const cae_prompt_arg text_editor_args[] = {
    {
	.name = "branch",
	.description = "The branch to push the changes to: fills in <branch_name> in the git "
		       "workflow (without it, the agent reads <branch_name> and picks it).",
	.required = false,
	.token = "<branch_name>",
	.check = check_branch,
    },
};

static const char *check_environment(const char *v)
{
	return *v && strlen(v) <= 64 ? NULL : "an environment name is 1 to 64 bytes";
}

static const cae_prompt_arg command_executor_args[] = {
    {
	.name = "environment",
	.description = "The environment the commands run in (python, node, java, go, miniforge "
		       "or a configured one): the section lists its tools (default: the "
		       "default environment).",
	.required = false,
	.token = NULL, /* chooses the text rather than filling it in */
	.check = check_environment,
    },
};

enum { SEC_COMMAND_EXECUTOR, SEC_TEXT_EDITOR, SEC_ENVIRONMENT_SELECTION, SEC_COUNT };

static const cae_prompt_section SECTIONS[SEC_COUNT] = {
    [SEC_COMMAND_EXECUTOR] =
	{
	    .name = "command-executor",
	    .title = "Command execution",
	    .description = "System-prompt section for the command executor: the isolated "
			   "execution environment, the command-executor_execute_command tool "
			   "and the commands the policy allows.",
	    .args = command_executor_args,
	    .nargs = ARRAY_SIZE(command_executor_args),
	},
    [SEC_TEXT_EDITOR] =
	{
	    .name = "text-editor",
	    .title = "Text editor and git workflow",
	    .description = "System-prompt section for the text editor tool (view, create, "
			   "str_replace, insert, undo_edit) and the git workflow that commits "
			   "and pushes the changes.",
	    .args = text_editor_args,
	    .nargs = ARRAY_SIZE(text_editor_args),
	},
    [SEC_ENVIRONMENT_SELECTION] =
	{
	    .name = "environment-selection",
	    .title = "Execution environment selection",
	    .description = "Section of the planning prompt: the configured execution "
			   "environments (name, image, recommended use) and how the plan names "
			   "its choice (selected_environment).",
	},
};

struct cae_prompts {
	char *text[SEC_COUNT]; /* rendered for the configuration; "" when disabled */
	bool enabled[SEC_COUNT];
	/* the command-executor section for each configured environment (its "environment"
	 * argument), n_envs of them */
	char **env_names, **env_text;
	size_t n_envs;
	char *instructions; /* NULL when neither section it joins is enabled */
};

static int section_index(const char *name)
{
	for (int i = 0; name && i < SEC_COUNT; i++)
		if (strcmp(SECTIONS[i].name, name) == 0)
			return i;
	return -1;
}

void cae_prompts_free(cae_prompts *p)
{
	if (!p)
		return;
	for (int i = 0; i < SEC_COUNT; i++)
		free(p->text[i]);
	for (size_t i = 0; i < p->n_envs; i++) {
		free(p->env_names[i]);
		free(p->env_text[i]);
	}
	free(p->env_names);
	free(p->env_text);
	free(p->instructions);
	free(p);
}

/* The instructions: the enabled ones of the command-executor and text-editor sections, a
 * blank line between them. */
static int join_instructions(cae_prompts *p)
{
	const char *ce = p->enabled[SEC_COMMAND_EXECUTOR] ? p->text[SEC_COMMAND_EXECUTOR] : NULL;
	const char *te = p->enabled[SEC_TEXT_EDITOR] ? p->text[SEC_TEXT_EDITOR] : NULL;
	if (!ce && !te)
		return 0;
	size_t a = ce ? strlen(ce) : 0, b = te ? strlen(te) : 0, sep = ce && te ? 1 : 0;
	p->instructions = malloc(a + sep + b + 1);
	if (!p->instructions)
		return -ENOMEM;
	if (a)
		memcpy(p->instructions, ce, a);
	if (sep)
		p->instructions[a] = '\n';
	if (b)
		memcpy(p->instructions + a + sep, te, b);
	p->instructions[a + sep + b] = '\0';
	return 0;
}

int cae_prompts_new(const cae_config *cfg, const cae_policy *policy, cae_prompts **out,
		    cae_error *err)
{
	*out = NULL;
	if (cfg->command_executor.enabled && !policy)
		return cae_error_set(err, -EINVAL,
				     "the command-executor section needs the command policy");
	cae_prompts *p = calloc(1, sizeof(*p));
	if (!p)
		return cae_error_set(err, -ENOMEM, "out of memory");
	p->enabled[SEC_COMMAND_EXECUTOR] = cfg->command_executor.enabled;
	p->enabled[SEC_TEXT_EDITOR] = cfg->text_editor_mcp.enabled;
	p->enabled[SEC_ENVIRONMENT_SELECTION] = cfg->command_executor.enabled;
	/* the backend resolved once for all the environments (auto probes the engine) */
	const char *backend = cfg->command_executor.enabled ? cae_backend_resolve_name(cfg) : NULL;
	cae_prompt_context dc = {.backend = backend};
	p->text[SEC_COMMAND_EXECUTOR] = cae_prompt_command_executor_for(cfg, policy, &dc);
	p->text[SEC_TEXT_EDITOR] = cae_prompt_text_editor(cfg);
	p->text[SEC_ENVIRONMENT_SELECTION] = cae_prompt_environment_selection(cfg);
	size_t ne = cfg->command_executor.enabled ? cfg->command_executor.n_environments : 0;
	p->env_names = calloc(ne + 1, sizeof(char *));
	p->env_text = calloc(ne + 1, sizeof(char *));
	bool whole = p->env_names && p->env_text;
	if (whole)
		p->n_envs = ne;
	for (size_t i = 0; whole && i < ne; i++) {
		const char *name = cfg->command_executor.environments[i].name;
		cae_prompt_context c = {.backend = backend, .environment = name};
		p->env_names[i] = strdup(name);
		p->env_text[i] = cae_prompt_command_executor_for(cfg, policy, &c);
		whole = p->env_names[i] && p->env_text[i];
	}
	for (int i = 0; i < SEC_COUNT; i++) {
		if (!p->text[i] || !whole) {
			cae_prompts_free(p);
			return cae_error_set(err, -ENOMEM, "out of memory");
		}
	}
	if (join_instructions(p) < 0) {
		cae_prompts_free(p);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	*out = p;
	return 0;
}

json_t *cae_prompts_list(const cae_prompts *p)
{
	json_t *list = json_array();
	for (int i = 0; list && i < SEC_COUNT; i++) {
		if (!p->enabled[i])
			continue;
		const cae_prompt_section *s = &SECTIONS[i];
		json_t *args = json_array();
		for (size_t k = 0; args && k < s->nargs; k++)
			if (json_array_append_new(
				args, json_pack("{s:s, s:s, s:b}", "name", s->args[k].name,
						"description", s->args[k].description, "required",
						s->args[k].required)) < 0) {
				json_decref(args);
				args = NULL;
			}
		json_t *item =
		    args ? json_pack("{s:s, s:s, s:s, s:o}", "name", s->name, "title", s->title,
				     "description", s->description, "arguments", args)
			 : NULL;
		if (json_array_append_new(list, item) < 0) {
			json_decref(list);
			return NULL;
		}
	}
	return list;
}

bool cae_prompts_offered(const cae_prompts *p, const char *name)
{
	int i = section_index(name);
	return i >= 0 && p->enabled[i];
}

const char *cae_prompts_description(const char *name)
{
	int i = section_index(name);
	return i >= 0 ? SECTIONS[i].description : NULL;
}

const char *cae_prompts_instructions(const cae_prompts *p)
{
	return p->instructions;
}

static const cae_prompt_arg *find_arg(const cae_prompt_section *s, const char *name)
{
	for (size_t k = 0; k < s->nargs; k++)
		if (strcmp(s->args[k].name, name) == 0)
			return &s->args[k];
	return NULL;
}

int cae__prompt_apply_args(const cae_prompt_section *s, const char *text, const json_t *args,
			   char **out, cae_error *err)
{
	*out = NULL;
	if (args && !json_is_null(args) && !json_is_object(args))
		return cae_error_set(err, -EINVAL,
				     "the arguments of prompt %s must be an object of strings",
				     s->name);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)args, key, v)
	{
		const cae_prompt_arg *a = find_arg(s, key);
		if (!a) {
			char names[256] = "";
			size_t o = 0;
			for (size_t k = 0; k < s->nargs && o < sizeof(names); k++)
				o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s",
						      k ? ", " : "", s->args[k].name);
			return cae_error_set(err, -EINVAL,
					     "prompt %s has no argument \"%.100s\" (it takes %s)",
					     s->name, key, s->nargs ? names : "none");
		}
		if (!json_is_string(v))
			return cae_error_set(err, -EINVAL,
					     "argument %s of prompt %s must be a string", key,
					     s->name);
		const char *value = json_string_value(v);
		if (strlen(value) != json_string_length(v))
			return cae_error_set(err, -EINVAL,
					     "argument %s of prompt %s contains a NUL character",
					     key, s->name);
		const char *why = a->check ? a->check(value) : NULL;
		if (why)
			return cae_error_set(err, -EINVAL, "argument %s of prompt %s: %s", key,
					     s->name, why);
	}
	for (size_t k = 0; k < s->nargs; k++)
		if (s->args[k].required && !json_object_get(args, s->args[k].name))
			return cae_error_set(err, -EINVAL,
					     "prompt %s needs the argument \"%s\" (%s)", s->name,
					     s->args[k].name, s->args[k].description);
	char *cur = strdup(text);
	for (size_t k = 0; cur && k < s->nargs; k++) {
		const char *value = json_string_value(json_object_get(args, s->args[k].name));
		if (!value || !s->args[k].token)
			continue;
		char *next = cae__prompt_replace(cur, s->args[k].token, value);
		free(cur);
		cur = next;
	}
	if (!cur)
		return cae_error_set(err, -ENOMEM, "out of memory");
	*out = cur;
	return 0;
}

int cae_prompts_get(const cae_prompts *p, const char *name, const json_t *args, char **text,
		    cae_error *err)
{
	*text = NULL;
	int i = section_index(name);
	if (i < 0)
		return cae_error_set(
		    err, -ENOENT,
		    "unknown prompt \"%.100s\" (the sections are command-executor, "
		    "text-editor and environment-selection)",
		    name ? name : "");
	const char *base = p->text[i];
	const char *env = json_string_value(json_object_get(args, "environment"));
	if (i == SEC_COMMAND_EXECUTOR && env && p->enabled[i]) {
		base = NULL;
		for (size_t k = 0; k < p->n_envs && !base; k++)
			if (strcmp(p->env_names[k], env) == 0)
				base = p->env_text[k];
		if (!base) {
			char names[256] = "";
			size_t o = 0;
			for (size_t k = 0; k < p->n_envs && o < sizeof(names); k++)
				o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s",
						      k ? ", " : "", p->env_names[k]);
			return cae_error_set(err, -EINVAL,
					     "argument environment of prompt command-executor: no "
					     "environment \"%.64s\" is configured (there are %s)",
					     env, names);
		}
	}
	return cae__prompt_apply_args(&SECTIONS[i], base, args, text, err);
}
