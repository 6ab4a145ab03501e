/* System-prompt sections (SPEC §9 "Prompts"): the text an agent's system prompt gains for
 * each enabled feature. The templates live in prompts/ and are embedded at build time. */
#ifndef CAE_PROMPT_H
#define CAE_PROMPT_H

#include "cae/config.h"
#include "cae/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* system_prompt_command_executor.txt with {allowed_commands_list} filled from the policy
 * (seed 000 §6.5). Returns a new string; "" when the command executor is disabled; NULL on
 * ENOMEM. */
char *cae_prompt_command_executor(const cae_config *cfg, const cae_policy *policy);

/* Replaces every "{name}" in template with value. New string, NULL on ENOMEM. */
char *cae_prompt_fill(const char *template_text, const char *name, const char *value);

#ifdef __cplusplus
}
#endif
#endif
