/* The planning prompt's environment table and the extraction of the planner's choice (the
 * default environment, with a warning, when the choice is missing or invalid). */
#include "cae/prompt.h"

#include "base/buf.h"
#include "base/macro.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

static const struct {
	const char *name;
	const char *use;
} recommended[] = {
    {"python", "Pure Python projects, Django/Flask"},
    {"miniforge", "Data science, conda environments"},
    {"node", "JavaScript/TypeScript, React/Vue/Angular"},
    {"java", "Java projects, Maven/Gradle"},
    {"go", "Go projects, Go modules"},
};

static const char *recommended_for(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(recommended); i++)
		if (strcmp(recommended[i].name, name) == 0)
			return recommended[i].use;
	return "Custom environment";
}

char *cae_prompt_environment_selection(const cae_config *cfg)
{
	if (!cfg->command_executor.enabled)
		return strdup("");
	cae_buf b;
	cae__buf_init(&b, 1u << 20);
	int r = 0; /* the section whole or none (NULL): a failed append leaves r negative */
	r |= cae__buf_puts(
	    &b, "## Execution Environment Selection\n\n"
		"You must select an appropriate execution environment for this task. The "
		"following environments are available:\n\n"
		"| Environment | Image | Recommended For |\n"
		"|------------|-------|-----------------|\n");
	for (size_t i = 0; i < cfg->command_executor.n_environments; i++) {
		const cae_config_environment *e = &cfg->command_executor.environments[i];
		r |= cae__buf_printf(&b, "| %s | %s | %s |\n", e->name, e->image,
				     recommended_for(e->name));
	}
	r |= cae__buf_printf(
	    &b,
	    "\nAdd your choice to the plan as\n"
	    "\"selected_environment\": {\"name\": \"<environment>\", \"reasoning\": \"<why>\"}\n"
	    "When unsure, choose \"%s\" (the default).\n",
	    cfg->command_executor.default_environment);
	if (r < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	return cae__buf_steal(&b, NULL);
}

/* The first JSON object in text that parses, trying the whole text, then ```json fences,
 * then every '{' in turn (bounded). New reference or NULL. */
static json_t *find_object(const char *text, size_t len)
{
	json_t *j = json_loadb(text, len, 0, NULL);
	if (json_is_object(j))
		return j;
	json_decref(j);
	int tries = 0;
	for (size_t i = 0; i < len && tries < 1000; i++) {
		if (text[i] != '{')
			continue;
		tries++;
		json_error_t e;
		j = json_loadb(text + i, len - i, JSON_DISABLE_EOF_CHECK, &e);
		if (json_is_object(j)) {
			/* Prefer an object that carries the field; keep looking otherwise. */
			if (json_object_get(j, "selected_environment"))
				return j;
			json_decref(j);
			continue;
		}
		json_decref(j);
	}
	return NULL;
}

static int fallback(const cae_config *cfg, cae_env_selection *sel, const char *why,
		    const char *requested)
{
	const char *def = cfg->command_executor.default_environment;
	char warn[512], comment[768];
	snprintf(warn, sizeof(warn), "%s; using the default environment \"%s\"", why, def);
	if (requested)
		snprintf(
		    comment, sizeof(comment),
		    "The execution environment \"%.100s\" selected in the plan is not available. "
		    "The default environment \"%s\" is used instead.",
		    requested, def);
	else
		snprintf(comment, sizeof(comment),
			 "No execution environment could be read from the plan (%s). The default "
			 "environment \"%s\" is used.",
			 why, def);
	sel->name = strdup(def);
	sel->fallback = true;
	sel->warning = strdup(warn);
	sel->comment = strdup(comment);
	return sel->name && sel->warning && sel->comment ? 0 : -ENOMEM;
}

int cae_prompt_select_environment(const cae_config *cfg, const char *text, size_t len,
				  cae_env_selection *sel)
{
	memset(sel, 0, sizeof(*sel));
	_cleanup_(json_decrefp) json_t *plan = text ? find_object(text, len) : NULL;
	if (!plan)
		return fallback(cfg, sel, "the planning response is not valid JSON", NULL);
	json_t *se = json_object_get(plan, "selected_environment");
	if (!se)
		return fallback(cfg, sel, "the plan has no selected_environment", NULL);
	const char *name = json_string_value(json_is_object(se) ? json_object_get(se, "name") : se);
	const char *why = json_string_value(json_object_get(se, "reasoning"));
	if (why)
		sel->reasoning = strdup(why);
	if (!name || !*name)
		return fallback(cfg, sel, "selected_environment.name is missing", NULL);
	sel->requested = strdup(name);
	if (!cae_config_environment_image(cfg, name)) {
		char w[256];
		snprintf(w, sizeof(w), "unknown environment \"%.100s\" in the plan", name);
		return fallback(cfg, sel, w, name);
	}
	sel->name = strdup(name);
	return sel->name ? 0 : -ENOMEM;
}

void cae_env_selection_clear(cae_env_selection *sel)
{
	if (!sel)
		return;
	free(sel->name);
	free(sel->requested);
	free(sel->reasoning);
	free(sel->warning);
	free(sel->comment);
	memset(sel, 0, sizeof(*sel));
}
