/* The network of the backends whose environments run a cae-helper over a stream (docker,
 * kubernetes; chan.h): with a filtered network the environment has no route out (docker:
 * network none), and its helper listens on 127.0.0.1:3128 and :1080 there; each connection
 * it accepts is carried over the stream it already has to this process (src/helper/tun.c),
 * where the channel's proxy (cae/net.h) decides and connects from the host's network. A
 * command is still one request on the stream; a connection costs a thread on each side.
 * Port forwards go the other way over the same stream. */
#include "backend/chan.h"

#include "backend/net-local.h"
#include "cae/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

static int serve_conn(void *ud, char kind, int fd)
{
	(void)kind; /* the proxy tells SOCKS5 from HTTP by the first byte */
	return cae_net_proxy_serve_fd(ud, fd);
}

void cae__chan_net_start(cae_chan *c)
{
	cae_backend *b = c->t->b;
	if (!cae_net_config_filtered(b->cfg))
		return;
	cae_error e = {0};
	cae_net_policy *pol = NULL;
	cae_net_proxy *px = NULL;
	cae_net_proxy_options o;
	cae_net_proxy_options_init(&o);
	o.task = c->uuid;
	int r = cae_net_policy_from_config(b->cfg, &pol, &e);
	if (r == 0)
		r = cae_net_proxy_new(pol, &o, b->log, &px, &e);
	if (r == 0)
		r = cae_helper_mux_net_listen(c->m, CAE_NET_HTTP_PORT, CAE_NET_SOCKS_PORT,
					      cae_net_proxy_env(), serve_conn, px, &e);
	if (r == 0) {
		c->px = px;
		return;
	}
	/* the stream's reader may hold px until the stream closes: freed with the channel */
	c->px = px;
	char event[64];
	snprintf(event, sizeof(event), "%s.network_unavailable", b->ops->name);
	cae_log_fields(b->log, CAE_LOG_WARN, event, json_pack("{s:s}", "task_uuid", c->uuid),
		       "the %s's network proxy could not start (%s): its commands have no "
		       "network",
		       c->t->ops->what, e.message);
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
}
