/* Rules across keys, checked after every load and every cae_config_set(): the default
 * environment is configured, an unconfined sandbox is asked for in so many words, the
 * network mode and external_access agree, protected paths lie inside the workspace, the
 * warm pool names configured environments and hands out containers younger than their
 * helper's lifetime. */
#include "config/config-internal.h"

#include "cae/net.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

static bool explicit(const struct cfg_ctx *c, const char *path)
{
	int i = cae__cfg_find_key(path);
	return i >= 0 && (c->origin[i].line > 0 || c->origin[i].env);
}

static const struct cfg_where *origin_of(const struct cfg_ctx *c, const char *path)
{
	return &c->origin[cae__cfg_find_key(path)];
}

/* Why a protected path is not one (NULL: it is): relative to the workspace, below it. */
static const char *protected_path_error(const char *p)
{
	if (p[0] == '/')
		return "is absolute: give a path relative to the workspace (e.g. .git/hooks)";
	bool below = false;
	for (const char *s = p; *s;) {
		size_t n = strcspn(s, "/");
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return "has a '..' component: give a path inside the workspace";
		if (n > 0 && !(n == 1 && s[0] == '.'))
			below = true;
		s += n;
		s += *s == '/';
	}
	if (!below)
		return "names the workspace itself: give a path inside it";
	return NULL;
}

int cae__cfg_validate(struct cfg_ctx *c, bool warn)
{
	cae_config *cfg = c->cfg;
	char list[512];
	int r;

	/* default_environment must name a configured environment */
	if (cfg->command_executor.n_environments > 0 &&
	    !cae_config_environment_image(cfg, cfg->command_executor.default_environment)) {
		size_t o = 0;
		list[0] = '\0';
		for (size_t i = 0; i < cfg->command_executor.n_environments && o < sizeof(list);
		     i++)
			o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "",
					      cfg->command_executor.environments[i].name);
		const char *path =
		    explicit(c, CE "default_environment") || !explicit(c, CE "environments")
			? CE "default_environment"
			: CE "environments";
		char vbuf[128];
		const char *de = cfg->command_executor.default_environment;
		cae__cfg_show_value(vbuf, sizeof(vbuf), de, strlen(de));
		return cae__cfg_key_error(
		    c, origin_of(c, path), cae__cfg_find_key(path),
		    "the default environment %s is not one of the configured environments (%s)",
		    vbuf, list);
	}

	/* running commands unconfined is a decision the config states in so many words */
	if (cfg->command_executor.local.sandbox == CAE_CONFIG_SANDBOX_NONE &&
	    !cfg->command_executor.local.unconfined)
		return cae__cfg_key_error(c, origin_of(c, CE "local.sandbox"),
					  cae__cfg_find_key(CE "local.sandbox"),
					  "none runs commands on this host unconfined: it needs "
					  "command_executor.local.unconfined: true");

	/* mode mcp runs the configured server: there must be one */
	if (cfg->text_editor_mcp.enabled && cfg->text_editor_mcp.mode == CAE_CONFIG_EDITOR_MCP &&
	    (cfg->text_editor_mcp.mcp_server.command.n == 0 ||
	     !cfg->text_editor_mcp.mcp_server.command.items[0][0]))
		return cae__cfg_key_error(c, origin_of(c, TE "mcp_server.command"),
					  cae__cfg_find_key(TE "mcp_server.command"),
					  "mode mcp needs the server's command (e.g. [npx, -y, "
					  "mcp-server-text-editor])");
	if (cfg->text_editor_mcp.mode == CAE_CONFIG_EDITOR_MCP &&
	    (!cfg->text_editor_mcp.mcp_server.tool || !cfg->text_editor_mcp.mcp_server.tool[0]))
		return cae__cfg_key_error(c, origin_of(c, TE "mcp_server.tool"),
					  cae__cfg_find_key(TE "mcp_server.tool"),
					  "mode mcp needs the server's tool name (text_editor)");

	/* network: mode and external_access describe one thing */
	struct cae_config_net_view {
		cae_config_network_mode *mode;
		bool *ext;
	} net = {&cfg->command_executor.docker.network.mode,
		 &cfg->command_executor.docker.network.external_access};
	bool mode_set = explicit(c, CE "docker.network.mode");
	bool ext_set = explicit(c, CE "docker.network.external_access");
	if (mode_set && ext_set && (*net.mode == CAE_CONFIG_NETWORK_NONE) == *net.ext) {
		return cae__cfg_key_error(c, origin_of(c, CE "docker.network.external_access"),
					  cae__cfg_find_key(CE "docker.network.external_access"),
					  "%s contradicts command_executor.docker.network.mode: %s",
					  *net.ext ? "true" : "false",
					  cae_config_network_mode_name(*net.mode));
	}
	if (mode_set)
		*net.ext = *net.mode != CAE_CONFIG_NETWORK_NONE;
	else if (!*net.ext)
		*net.mode = CAE_CONFIG_NETWORK_NONE;
	else if (*net.mode == CAE_CONFIG_NETWORK_NONE)
		*net.mode = CAE_CONFIG_NETWORK_BRIDGE;
	if (cfg->command_executor.docker.network.whitelist_mode && !*net.ext)
		return cae__cfg_key_error(
		    c, origin_of(c, CE "docker.network.whitelist_mode"),
		    cae__cfg_find_key(CE "docker.network.whitelist_mode"),
		    "a domain allow-list needs external access (the network mode is none)");

	/* network: every entry of the policy's lists is one the proxy can match */
	static const char *const net_lists[] = {CE "docker.network.allowed_domains",
						CE "docker.network.denied_domains",
						CE "docker.network.allowed_addresses"};
	const cae_config_strlist *net_items[] = {
	    &cfg->command_executor.docker.network.allowed_domains,
	    &cfg->command_executor.docker.network.denied_domains,
	    &cfg->command_executor.docker.network.allowed_addresses};
	for (size_t k = 0; k < 3; k++)
		for (size_t i = 0; i < net_items[k]->n; i++) {
			const char *e = net_items[k]->items[i];
			const char *why =
			    k < 2 ? cae_net_domain_entry_error(e) : cae_net_address_entry_error(e);
			if (why) {
				char vbuf[128];
				cae__cfg_show_value(vbuf, sizeof(vbuf), e, strlen(e));
				return cae__cfg_key_error(c, origin_of(c, net_lists[k]),
							  cae__cfg_find_key(net_lists[k]),
							  "item %zu: %s %s", i + 1, vbuf, why);
			}
		}

	/* protected paths: inside the workspace, below it, a bounded number */
	const cae_config_strlist *pp = &cfg->command_executor.protected_paths;
	if (pp->n > CAE_CONFIG_MAX_PROTECTED)
		return cae__cfg_key_error(c, origin_of(c, CE "protected_paths"),
					  cae__cfg_find_key(CE "protected_paths"),
					  "%zu paths; at most %d", pp->n, CAE_CONFIG_MAX_PROTECTED);
	for (size_t i = 0; i < pp->n; i++) {
		const char *why = protected_path_error(pp->items[i]);
		if (why) {
			char vbuf[128];
			cae__cfg_show_value(vbuf, sizeof(vbuf), pp->items[i], strlen(pp->items[i]));
			return cae__cfg_key_error(c, origin_of(c, CE "protected_paths"),
						  cae__cfg_find_key(CE "protected_paths"),
						  "item %zu: %s %s", i + 1, vbuf, why);
		}
	}

	/* the warm pool: environments that exist, containers that outlive their age */
	const __typeof__(cfg->command_executor.pool) *pool = &cfg->command_executor.pool;
	for (size_t i = 0; i < pool->environments.n; i++) {
		if (cfg->command_executor.n_environments > 0 &&
		    !cae_config_environment_image(cfg, pool->environments.items[i])) {
			char vbuf[128];
			const char *e = pool->environments.items[i];
			cae__cfg_show_value(vbuf, sizeof(vbuf), e, strlen(e));
			return cae__cfg_key_error(c, origin_of(c, CE "pool.environments"),
						  cae__cfg_find_key(CE "pool.environments"),
						  "item %zu: %s is not a configured environment",
						  i + 1, vbuf);
		}
	}
	int life = cfg->command_executor.docker.helper_lifetime_seconds;
	if (pool->size > 0 && life > 0 && pool->max_age_seconds >= life)
		return cae__cfg_key_error(
		    c, origin_of(c, CE "pool.max_age_seconds"),
		    cae__cfg_find_key(CE "pool.max_age_seconds"),
		    "%d is not below command_executor.docker.helper_lifetime_seconds (%d): a pool "
		    "container's helper would stop it before it is handed out",
		    pool->max_age_seconds, life);

	if (warn && cfg->command_executor.docker.mount_docker_socket) {
		r = cae__cfg_add_warning(
		    cfg, "command_executor.docker.mount_docker_socket is true: the agent "
			 "controls the host's Docker engine (root on the host)");
		if (r < 0)
			return r;
	}
	return 0;
}
