/* Internal to src/prompt: what the section renderers (prompt.c, selection.c) and the set of
 * sections (sections.c) share, and the shape of a section's arguments. */
#ifndef CAE_PROMPT_INTERNAL_H
#define CAE_PROMPT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"
#include "cae/prompt.h"

/* Replaces every occurrence of token (non-empty) in text with value. New string, NULL on
 * ENOMEM. */
char *cae__prompt_replace(const char *text, const char *token, const char *value);

/* text (the command-executor section, its policy list filled) with the tokens of the
 * environment filled (context.c): {execution_environment}, {environment_name},
 * {environment_tools}, {dependencies}, {test_examples}, {build_examples}, {lint_examples}.
 * ctx may be NULL. New string, NULL on ENOMEM. */
char *cae__prompt_context_fill(const char *text, const cae_config *cfg, const cae_policy *policy,
			       const cae_prompt_context *ctx);

/* An argument of a section: given, its value replaces every `token` in the section's text
 * (token NULL: the argument chooses the text instead, see cae_prompts_get); absent, the text
 * keeps the token. check (may be NULL) returns why a value is refused, or
 * NULL. */
typedef struct cae_prompt_arg {
	const char *name;
	const char *description;
	bool required;
	const char *token;
	const char *(*check)(const char *value);
} cae_prompt_arg;

typedef struct cae_prompt_section {
	const char *name;
	const char *title;
	const char *description;
	const cae_prompt_arg *args;
	size_t nargs;
} cae_prompt_section;

/* The text of section s (text is the section rendered for the configuration) with args
 * (borrowed, may be NULL) applied. 0 with *out new; -EINVAL with err set for arguments that
 * are not an object of strings, an unknown or missing required argument, or a value its
 * check refuses; -ENOMEM. */
int cae__prompt_apply_args(const cae_prompt_section *s, const char *text, const json_t *args,
			   char **out, cae_error *err);

#endif
