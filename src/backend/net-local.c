/* The local backend's filtered network (see cae/net.h and ARCHITECTURE.md): the sandbox has
 * its own empty network namespace (bwrap --unshare-net, as for network none); its helper,
 * inside, makes the listening sockets 127.0.0.1:3128 and :1080 there and hands them over
 * the channel; this process, the one that owns the sandbox, accepts on them and runs the
 * proxy, which connects from the host's network. A command is still one fork in the helper;
 * a connection costs a thread here and nothing in the sandbox. */
#include "backend/net-local.h"

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
