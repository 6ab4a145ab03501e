/* The command-executor and text-editor sections, from the embedded templates. */
#include "cae/prompt.h"

#include "prompt/prompt-internal.h"

#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

extern const char cae_embedded_system_prompt_command_executor[];
extern const char cae_embedded_system_prompt_text_editor[];

char *cae__prompt_replace(const char *text, const char *token, const char *value)
{
	size_t tl = strlen(token);
	cae_buf b;
	cae__buf_init(&b, 16u << 20);
	const char *p = text;
	int r = 0; /* the text whole or none (NULL): a failed append leaves r negative */
	for (;;) {
		const char *hit = strstr(p, token);
		if (!hit) {
			r |= cae__buf_puts(&b, p);
			break;
		}
		r |= cae__buf_append(&b, p, (size_t)(hit - p));
		r |= cae__buf_puts(&b, value);
		p = hit + tl;
	}
	if (r < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	return cae__buf_steal(&b, NULL);
}

char *cae_prompt_fill(const char *tpl, const char *name, const char *value)
{
	char key[128];
	size_t kl = strlen(name) + 2;
	if (kl >= sizeof(key))
		return NULL;
	key[0] = '{';
	memcpy(key + 1, name, kl - 2);
	key[kl - 1] = '}';
	key[kl] = '\0';
	return cae__prompt_replace(tpl, key, value);
}

char *cae_prompt_command_executor_for(const cae_config *cfg, const cae_policy *policy,
				      const cae_prompt_context *ctx)
{
	if (!cfg->command_executor.enabled)
		return strdup("");
	char *list = cae_policy_allowed_text(policy);
	if (!list)
		return NULL;
	char *filled = cae_prompt_fill(cae_embedded_system_prompt_command_executor,
				       "allowed_commands_list", list);
	free(list);
	char *out = filled ? cae__prompt_context_fill(filled, cfg, policy, ctx) : NULL;
	free(filled);
	return out;
}

char *cae_prompt_command_executor(const cae_config *cfg, const cae_policy *policy)
{
	return cae_prompt_command_executor_for(cfg, policy, NULL);
}

char *cae_prompt_text_editor(const cae_config *cfg)
{
	return strdup(cfg->text_editor_mcp.enabled ? cae_embedded_system_prompt_text_editor : "");
}
