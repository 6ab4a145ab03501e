/* System-prompt sections: the text an agent's system prompt gains for
 * each enabled feature. The templates live in prompts/ and are embedded at build time.
 *
 * cae_prompts is the set of sections for one configuration, with their names, descriptions
 * and arguments: `cae prompt` prints one of them and `cae mcp` serves them as MCP prompts
 * and as its `instructions`, through the same functions, so both give the same text. */
#ifndef CAE_PROMPT_H
#define CAE_PROMPT_H

#include "cae/export.h"

#include "cae/config.h"
#include "cae/error.h"
#include "cae/policy.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the command-executor section says of the environment commands run in. */
typedef struct cae_prompt_context {
	/* "docker", "local" or "kubernetes"; NULL: the configured backend, "auto" resolved as
	 * cae_backend_new resolves it */
	const char *backend;
	/* the environment's name (python, node, java, go, miniforge, or a configured custom
	 * one); NULL: the default environment */
	const char *environment;
	/* a prepared environment's ContainerInfo "deps" (borrowed): the section says what each
	 * install did; NULL: before a prepare (it says how to learn that) */
	const json_t *deps;
} cae_prompt_context;

/* system_prompt_command_executor.txt with {allowed_commands_list} filled from the policy
 * (one line per category) and the environment of ctx (NULL: all defaults): the backend
 * named as it is (a Docker container, a Kubernetes pod, a sandbox on this host), the tools
 * that exist there (cae's image's tool list; on the local backend those of it this host
 * has; the policy's exclusions left out), examples with them, and the dependency step as it
 * went. Returns a new string; "" when the command executor is disabled; NULL on ENOMEM. */
CAE_EXPORT char *cae_prompt_command_executor_for(const cae_config *cfg, const cae_policy *policy,
						 const cae_prompt_context *ctx);
/* cae_prompt_command_executor_for with no context. */
CAE_EXPORT char *cae_prompt_command_executor(const cae_config *cfg, const cae_policy *policy);

/* system_prompt_text_editor.txt: the text editor tool and the git workflow.
 * "" when the text editor is disabled. New string, NULL on ENOMEM. */
CAE_EXPORT char *cae_prompt_text_editor(const cae_config *cfg);

/* The planning prompt's "Execution Environment Selection" section: a table of
 * the configured environments (name, image, recommended use) and the `selected_environment`
 * field the plan must carry. "" when the command executor is disabled. New string. */
CAE_EXPORT char *cae_prompt_environment_selection(const cae_config *cfg);

/* The outcome of reading `selected_environment.name` from a planning response. */
typedef struct cae_env_selection {
	char *name;	 /* the environment to use (a configured one, or the default) */
	char *requested; /* what the plan asked for, NULL when it named none */
	char *reasoning; /* selected_environment.reasoning, when given */
	bool fallback;	 /* true when the default was used instead of the plan's choice */
	char *warning;	 /* why (for the log), NULL when no fallback */
	char *comment;	 /* text to post on the issue / merge request, NULL when no fallback */
} cae_env_selection;

/* Extracts selected_environment.name from a planning response: the
 * text may be the JSON itself, JSON inside a Markdown fence, or JSON surrounded by prose.
 * A missing field, an unknown name or malformed JSON select the default environment with a
 * warning and a comment. Always fills *sel (free with cae_env_selection_clear); returns 0 or
 * -ENOMEM. */
CAE_EXPORT int cae_prompt_select_environment(const cae_config *cfg, const char *text, size_t len,
					     cae_env_selection *sel);
CAE_EXPORT void cae_env_selection_clear(cae_env_selection *sel);

/* The sections of one configuration, rendered when made; immutable after, so they may be
 * read from several threads at once. Section names: "command-executor", "text-editor",
 * "environment-selection". */
typedef struct cae_prompts cae_prompts;

/* Renders every section of cfg (borrowed, only during the call) with policy (borrowed, may
 * be NULL when the command executor is disabled). Returns 0, or -errno with err set. */
CAE_EXPORT int cae_prompts_new(const cae_config *cfg, const cae_policy *policy, cae_prompts **out,
			       cae_error *err);
CAE_EXPORT void cae_prompts_free(cae_prompts *p); /* accepts NULL */

/* The sections whose feature the configuration enables, in the MCP prompts/list form:
 * [{name, title, description, arguments: [{name, description, required}]}]. New reference,
 * NULL on ENOMEM. */
CAE_EXPORT json_t *cae_prompts_list(const cae_prompts *p);
/* True when section name is in cae_prompts_list. */
CAE_EXPORT bool cae_prompts_offered(const cae_prompts *p, const char *name);
/* The section's description (static), NULL for an unknown name. */
CAE_EXPORT const char *cae_prompts_description(const char *name);

/* The text of section name with args (borrowed, may be NULL: an object whose values are
 * strings, the MCP prompts/get arguments). A section whose feature is disabled is "". *text
 * is new. Returns 0; -ENOENT for an unknown name; -EINVAL for arguments that are not an
 * object of strings, an argument the section does not take, a missing required one or a
 * bad value (err says which and why); -ENOMEM. */
CAE_EXPORT int cae_prompts_get(const cae_prompts *p, const char *name, const json_t *args,
			       char **text, cae_error *err);

/* What an MCP server's initialize answer carries as instructions: the command-executor
 * section, a blank line, the text-editor section (each only when enabled). Borrowed from p;
 * NULL when both are disabled. */
CAE_EXPORT const char *cae_prompts_instructions(const cae_prompts *p);

/* Replaces every "{name}" in template with value. New string, NULL on ENOMEM. */
CAE_EXPORT char *cae_prompt_fill(const char *template_text, const char *name, const char *value);

#ifdef __cplusplus
}
#endif
#endif
