/* The network of the backends whose environments run a cae-helper over a stream (docker,
 * kubernetes; chan.h): with a filtered network the environment has no route out (docker:
 * network none), and its helper listens on 127.0.0.1:3128 and :1080 there; each connection
 * it accepts is carried over the stream it already has to this process (src/helper/tun.c),
 * where the channel's proxy (cae/net.h) decides and connects from the host's network. A
 * command is still one request on the stream; a connection costs a thread on each side.
 * With an engine on this host the helper hands its listeners to this process instead
 * (net-handover.h): the proxy accepts on them, and the connections' bytes never cross the
 * stream. Port forwards go the other way over the same stream. */
#include "backend/chan.h"

#include "backend/net-handover.h"
#include "backend/net-local.h"
#include "backend/pkgcache.h"
#include "base/macro.h"
#include "cae/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/banned.h"

char *cae__net_forge(const cae_config *cfg, const cae_task *task)
{
	_cleanup_free_ char *url = NULL;
	const char *token = NULL, *user = NULL;
	/* a warm pool's container is made for no task (its forge is recorded when claimed); a
	 * GitLab project named by owner and name is on gitlab.api_url's host (no API request
	 * for its path here) */
	if (!task || (!task->repo && (!task->owner || !task->name)))
		return NULL;
	if (!task->repo && task->platform && strcmp(task->platform, "gitlab") == 0)
		url =
		    strdup(cfg->gitlab.api_url ? cfg->gitlab.api_url : "https://gitlab.com/api/v4");
	else if (cae__git_clone_source(cfg, task, &url, &token, &user, NULL) < 0)
		return NULL;
	if (!url)
		return NULL;
	int port;
	const char *p;
	if (strncmp(url, "https://", 8) == 0) {
		port = 443;
		p = url + 8;
	} else if (strncmp(url, "http://", 7) == 0) {
		port = 80;
		p = url + 7;
	} else {
		return NULL; /* ssh, file: nothing the proxy carries */
	}
	size_t n = strcspn(p, "/?#");
	const char *at = memchr(p, '@', n);
	if (at) {
		n -= (size_t)(at + 1 - p);
		p = at + 1;
	}
	if (n == 0 || p[0] == '[')
		return NULL;
	const char *colon = memchr(p, ':', n);
	size_t hn = colon ? (size_t)(colon - p) : n;
	if (colon) {
		char *end = NULL;
		long v = strtol(colon + 1, &end, 10);
		if (end != p + n || v < 1 || v > 65535)
			return NULL;
		port = (int)v;
	}
	char *forge = NULL;
	if (asprintf(&forge, "%.*s:%d", (int)hn, p, port) < 0)
		return NULL;
	return forge;
}

bool cae__net_none(const cae_config *cfg, const char *backend)
{
	if (strcmp(backend, "local") == 0)
		return !cfg->command_executor.local.network;
	return cfg->command_executor.docker.network.mode == CAE_CONFIG_NETWORK_NONE ||
	       !cfg->command_executor.docker.network.external_access;
}

bool cae__net_full(const cae_config *cfg, const char *backend)
{
	return !cae_net_config_filtered(cfg) && !cae__net_none(cfg, backend);
}

bool cae__net_proxied(const cae_config *cfg, const char *backend, const char *forge)
{
	return cae_net_config_filtered(cfg) || (forge && cae__net_none(cfg, backend));
}

json_t *cae__net_info(const cae_config *cfg, const char *backend, const cae_task *task)
{
	_cleanup_free_ char *forge = cae__net_forge(cfg, task);
	bool proxied = cae__net_proxied(cfg, backend, forge);
	json_t *j = json_pack("{s:s}", "access",
			      cae_net_config_filtered(cfg)  ? "filtered"
			      : cae__net_none(cfg, backend) ? "none"
							    : "full");
	if (j && proxied) {
		json_object_set_new(j, "proxy",
				    json_pack("{s:s, s:s}", "http", "http://127.0.0.1:3128",
					      "socks5", "socks5h://127.0.0.1:1080"));
		if (forge)
			json_object_set_new(j, "forge", json_string(forge));
	}
	return j;
}

static int serve_conn(void *ud, char kind, int fd)
{
	(void)kind; /* the proxy tells SOCKS5 from HTTP by the first byte */
	return cae_net_proxy_serve_fd(ud, fd);
}

cae_net_proxy *cae__net_mux_start(cae_backend *b, cae_helper_mux *m, const char *uuid,
				  const char *forge, const char *what, bool prepare,
				  const char *net_dir)
{
	if (!m || !cae__net_proxied(b->cfg, b->ops->name, forge))
		return NULL;
	cae_error e = {0};
	cae_net_policy *pol = NULL;
	cae_net_proxy *px = NULL;
	cae_net_proxy_options o;
	cae_net_proxy_options_init(&o);
	o.task = uuid;
	int r = cae_net_policy_for_forge(b->cfg, forge, &pol, &e);
	if (r == 0)
		r = cae_net_proxy_new(pol, &o, b->log, &px, &e);
	/* the prepare's own steps (the clone) reach no server of the environment's loopback:
	 * everything goes through the proxy, a forge on the host's loopback too */
	const char *env[16] = {NULL};
	size_t k = 0;
	for (const char *const *v = cae_net_proxy_env(); *v && k < 15; v++)
		if (!prepare || strncasecmp(*v, "no_proxy=", 9) != 0)
			env[k++] = *v;
	cae__net_handover h = {.dirfd = -1, .lfd = -1};
	bool hand = r == 0 && net_dir && cae__net_handover_open(net_dir, &h) == 0;
	if (r == 0)
		r = cae_helper_mux_net_listen_handover(m, CAE_NET_HTTP_PORT, CAE_NET_SOCKS_PORT,
						       env, hand ? h.path : NULL,
						       hand ? h.token : NULL, serve_conn, px, &e);
	if (hand) {
		int direct =
		    r == 0 ? cae__net_handover_take(&h, px, CAE_NET_HTTP_PORT, CAE_NET_SOCKS_PORT)
			   : 0;
		cae__net_handover_close(&h);
		char event[64];
		snprintf(event, sizeof(event), "%s.network_path", b->ops->name);
		cae_log_fields(b->log, CAE_LOG_DEBUG, event,
			       json_pack("{s:s, s:s}", "task_uuid", uuid, "path",
					 direct ? "socket" : "stream"),
			       "the %s's proxy connections come %s", what,
			       direct ? "through its handed-over listeners"
				      : "through the helper's stream");
	}
	if (r < 0) {
		char event[64];
		snprintf(event, sizeof(event), "%s.network_unavailable", b->ops->name);
		cae_log_fields(b->log, CAE_LOG_WARN, event, json_pack("{s:s}", "task_uuid", uuid),
			       "the %s's network proxy could not start (%s): its commands have no "
			       "network",
			       what, e.message);
	}
	/* (after a failure too: the stream's reader may hold px until the stream closes) */
	return px;
}

void cae__chan_net_start(cae_chan *c)
{
	c->px = cae__net_mux_start(c->t->b, c->m, c->uuid, c->forge, c->t->ops->what, false,
				   c->net_dir);
	cae__pkgcache_serve_start(c);
}

void cae__chan_net_report(cae_chan *c, cae_run_result *res)
{
	if (c->px)
		cae__local_net_report(c->px, res);
}

json_t *cae__chan_network_denied(cae_chan_table *t, const char *uuid)
{
	json_t *d = NULL;
	pthread_mutex_lock(&t->lock);
	for (cae_chan *c = t->list; c && !d; c = c->next)
		if (c->px && strcmp(c->uuid, uuid) == 0)
			d = cae_net_proxy_take_denied(c->px);
	pthread_mutex_unlock(&t->lock);
	return d;
}

int cae__chan_port_forward(cae_chan_table *t, const char *uuid, int port, int *host_port,
			   cae_error *err)
{
	int r;
	cae_chan *c = cae__chan_helper_for(t, uuid, &r, err);
	if (!c)
		return r;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < c->n_fwd; i++) {
		if (cae_helper_forward_port(c->fwd[i]) == port) {
			*host_port = cae_helper_forward_host_port(c->fwd[i]);
			pthread_mutex_unlock(&t->lock);
			cae__chan_release(t, c);
			return 0;
		}
	}
	pthread_mutex_unlock(&t->lock);
	cae_helper_forward *f = NULL;
	r = cae_helper_forward_open(c->m, port, &f, host_port, err);
	if (r == 0) {
		pthread_mutex_lock(&t->lock);
		cae_helper_forward **n = realloc(c->fwd, (c->n_fwd + 1) * sizeof(*n));
		if (n) {
			c->fwd = n;
			c->fwd[c->n_fwd++] = f;
			f = NULL;
		}
		pthread_mutex_unlock(&t->lock);
		if (f) {
			cae_helper_forward_close(f);
			r = cae_error_set(err, -ENOMEM, "out of memory");
		}
	}
	if (r == 0)
		cae_log_fields(t->b->log, CAE_LOG_INFO, "network.port_forward",
			       json_pack("{s:s, s:i, s:i}", "task_uuid", uuid, "port", port,
					 "host_port", *host_port),
			       "127.0.0.1:%d forwards to port %d of the environment", *host_port,
			       port);
	cae__chan_release(t, c);
	return r;
}

void cae__chan_net_close_forwards(cae_chan *c)
{
	for (size_t i = 0; i < c->n_fwd; i++)
		cae_helper_forward_close(c->fwd[i]);
	free(c->fwd);
	c->fwd = NULL;
	c->n_fwd = 0;
}

void cae__chan_net_free(cae_chan *c)
{
	cae_net_proxy_free(c->px);
	c->px = NULL;
	free(c->net_dir);
	c->net_dir = NULL;
}
