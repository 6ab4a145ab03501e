/* Fuzz target: arbitrary bytes as what a client sends the network proxy (an HTTP proxy
 * request head, a SOCKS5 greeting, a SOCKS5 request) and as policy entries. Must never
 * crash, leak or hang, and every parse must be well-formed: what it consumed lies within the
 * input, a host it names is a bounded lower-case name or address with a port in range, and a
 * rewritten HTTP head is one request head (no control characters but CR LF and tab, one
 * Host, ending at its first empty line). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cae/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const cae_net_request *r, size_t size)
{
	if (r->kind == CAE_NET_REQ_INCOMPLETE || r->kind == CAE_NET_REQ_BAD) {
		if (r->head)
			abort();
		return;
	}
	if (r->consumed == 0 || r->consumed > size)
		abort();
	if (r->kind == CAE_NET_REQ_SOCKS_GREETING || r->kind == CAE_NET_REQ_SOCKS_BADCMD)
		return;
	size_t hl = strnlen(r->host, sizeof(r->host));
	if (hl == 0 || hl == sizeof(r->host) || r->port < 0 || r->port > 65535)
		abort();
	for (size_t i = 0; i < hl; i++) {
		char c = r->host[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
		      c == '_' || c == ':'))
			abort();
	}
	if (r->kind == CAE_NET_REQ_FORWARD) {
		if (!r->head || r->head_len < 4 || memcmp(r->head + r->head_len - 4, "\r\n\r\n", 4))
			abort();
		const char *end = strstr(r->head, "\r\n\r\n");
		if (!end || (size_t)(end - r->head) + 4 != r->head_len)
			abort();
		for (size_t i = 0; i < r->head_len; i++) {
			unsigned char c = (unsigned char)r->head[i];
			if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
				abort();
		}
		size_t hosts = 0;
		for (const char *p = r->head; (p = strstr(p, "\r\nHost: ")); p++)
			hosts++;
		if (hosts != 1)
			abort();
	} else if (r->head) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static cae_net_policy *p;
	if (!p) {
		const char *allowed[] = {"example.com", "*.example.org:443"};
		const char *addrs[] = {"127.0.0.1/32"};
		cae_net_policy_spec spec = {true, allowed, 2, NULL, 0, addrs, 1};
		if (cae_net_policy_new(&spec, &p, NULL) < 0)
			abort();
	}
	for (int socks = 0; socks < 2; socks++) {
		cae_net_request r;
		cae_net_parse_request((const char *)data, size, socks, &r);
		check_request(&r, size);
		if (r.kind == CAE_NET_REQ_CONNECT || r.kind == CAE_NET_REQ_FORWARD ||
		    r.kind == CAE_NET_REQ_SOCKS_CONNECT) {
			char why[512];
			cae_net_verdict v =
			    cae_net_policy_check(p, r.host, r.port, why, sizeof(why));
			if ((v == CAE_NET_ALLOW) != (why[0] == '\0'))
				abort();
		}
		free(r.head);
	}
	/* the same bytes as a policy entry */
	char entry[300];
	size_t n = size < sizeof(entry) - 1 ? size : sizeof(entry) - 1;
	memcpy(entry, data, n);
	entry[n] = '\0';
	(void)cae_net_domain_entry_error(entry);
	(void)cae_net_address_entry_error(entry);
	return 0;
}
