/* The local backend's filtered network (see cae/net.h and ARCHITECTURE.md): the sandbox has
 * its own empty network namespace (bwrap --unshare-net, as for network none); its helper,
 * inside, makes the listening sockets 127.0.0.1:3128 and :1080 there and hands them over
 * the channel; this process, the one that owns the sandbox, accepts on them and runs the
 * proxy, which connects from the host's network. A command is still one fork in the helper;
 * a connection costs a thread here and nothing in the sandbox. */
#include "backend/net-local.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

int cae__local_net_start(cae_helper *h, const cae_config *cfg, cae_log *log, const char *task,
			 const char *forge, cae_net_proxy **out, cae_error *err)
{
	*out = NULL;
	cae_net_policy *pol = NULL;
	int r = cae_net_policy_for_forge(cfg, forge, &pol, err);
	if (r < 0)
		return r;
	cae_net_proxy_options o;
	cae_net_proxy_options_init(&o);
	o.task = task;
	cae_net_proxy *px = NULL;
	r = cae_net_proxy_new(pol, &o, log, &px, err);
	if (r < 0)
		return r;
	int hfd = -1, sfd = -1;
	r = cae_helper_net_listeners(h, 10000, &hfd, &sfd, err);
	if (r == 0) {
		r = cae_net_proxy_listen_fd(px, hfd); /* taken over, also on failure */
		hfd = -1;
	}
	if (r == 0) {
		r = cae_net_proxy_listen_fd(px, sfd);
		sfd = -1;
	}
	if (hfd >= 0)
		close(hfd);
	if (sfd >= 0)
		close(sfd);
	if (r < 0) {
		cae_net_proxy_free(px);
		return cae_error_set(err, r, "the network proxy could not start: %s",
				     err && err->message[0] ? err->message : strerror(-r));
	}
	*out = px;
	return 0;
}

void cae__local_net_report(cae_net_proxy *px, cae_run_result *res)
{
	json_t *d = cae_net_proxy_take_denied(px);
	if (!d)
		return;
	free(res->network_denied);
	res->network_denied = json_dumps(d, JSON_COMPACT);
	json_decref(d);
}

/* A sandbox's port forwards: one stream to its helper (opened on the first), carrying the
 * forwards' connections (cae_helper_forward). */
struct cae__local_fwd {
	pthread_mutex_t lock;
	cae_helper_mux *m;
	cae_helper_forward **f;
	size_t n;
};

cae__local_fwd *cae__local_fwd_new(void)
{
	cae__local_fwd *f = calloc(1, sizeof(*f));
	if (f)
		pthread_mutex_init(&f->lock, NULL);
	return f;
}

int cae__local_fwd_open(cae__local_fwd *f, cae_helper *h, int port, int *host_port, cae_error *err)
{
	if (!f)
		return cae_error_set(err, -ENOMEM, "out of memory");
	pthread_mutex_lock(&f->lock);
	int r = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (cae_helper_forward_port(f->f[i]) == port) {
			*host_port = cae_helper_forward_host_port(f->f[i]);
			pthread_mutex_unlock(&f->lock);
			return 0;
		}
	}
	if (!f->m || !cae_helper_mux_alive(f->m)) {
		/* (a dead stream's forwards go with it) */
		for (size_t i = 0; i < f->n; i++)
			cae_helper_forward_close(f->f[i]);
		f->n = 0;
		cae_helper_mux_close(f->m);
		f->m = NULL;
		r = cae_helper_open_mux(h, 10000, &f->m, err);
	}
	cae_helper_forward **nf = r == 0 ? realloc(f->f, (f->n + 1) * sizeof(*nf)) : NULL;
	if (r == 0 && !nf)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	if (nf)
		f->f = nf;
	cae_helper_forward *one = NULL;
	if (r == 0)
		r = cae_helper_forward_open(f->m, port, &one, host_port, err);
	if (r == 0)
		f->f[f->n++] = one;
	pthread_mutex_unlock(&f->lock);
	return r;
}

void cae__local_fwd_free(cae__local_fwd *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		cae_helper_forward_close(f->f[i]);
	free(f->f);
	cae_helper_mux_close(f->m);
	pthread_mutex_destroy(&f->lock);
	free(f);
}
