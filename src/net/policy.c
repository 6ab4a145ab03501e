/* The network policy (see cae/net.h): entry syntax, the decision by name, and which
 * addresses may be connected to. */
#include "cae/net.h"

#include "base/macro.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

struct domain_entry {
	char name[CAE_NET_MAX_NAME + 1]; /* without the "*." */
	bool wildcard;
	int port; /* 0: any */
};

struct cidr {
	int family;
	unsigned char addr[16];
	int prefix;
};

struct cae_net_policy {
	bool whitelist_mode;
	struct domain_entry *allowed, *denied;
	size_t n_allowed, n_denied;
	struct cidr *cidrs;
	size_t n_cidrs;
};

/* A host name: labels of [a-z0-9_-] (any case), 1 to 63 characters, not starting or ending
 * with '-', joined by single dots, at most 253 characters. */
static const char *name_error(const char *s, size_t n)
{
	if (n == 0)
		return "is empty";
	if (n > CAE_NET_MAX_NAME)
		return "is longer than 253 characters";
	size_t label = 0;
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? s[i] : '.';
		if (c == '.') {
			if (label == 0)
				return "has an empty label";
			if (s[i - 1] == '-' || s[i - label] == '-')
				return "has a label that starts or ends with '-'";
			label = 0;
			continue;
		}
		if (c == '*')
			return "has a '*' that is not a leading \"*.\"";
		if (!isalnum((unsigned char)c) && c != '-' && c != '_')
			return "has a character a host name cannot have";
		if (++label > 63)
			return "has a label longer than 63 characters";
	}
	return NULL;
}

static bool is_ip_literal(const char *s)
{
	unsigned char buf[16];
	struct in_addr a4;
	/* inet_aton also takes 127.1, 0x7f000001, 2130706433: what resolvers take as numbers */
	return inet_pton(AF_INET6, s, buf) == 1 || inet_aton(s, &a4) != 0;
}

/* Parses an entry into e (may be NULL); returns why it is malformed, NULL when it is not. */
static const char *parse_domain(const char *entry, struct domain_entry *e)
{
	if (!entry || !*entry)
		return "is empty";
	for (const char *p = entry; *p; p++)
		if (isspace((unsigned char)*p) || (unsigned char)*p < 0x20)
			return "has a blank or control character";
	if (strstr(entry, "://"))
		return "has a scheme: give a host name (e.g. example.com or *.example.com)";
	if (strchr(entry, '/') || strchr(entry, '?') || strchr(entry, '#'))
		return "has a path: give a host name (e.g. example.com or *.example.com)";
	if (strchr(entry, '@'))
		return "has a user part: give a host name";
	if (entry[0] == '[')
		return "is an address: addresses go in allowed_addresses";
	const char *name = entry;
	bool wildcard = false;
	if (strncmp(name, "*.", 2) == 0) {
		wildcard = true;
		name += 2;
	}
	const char *colon = strchr(name, ':');
	size_t n = colon ? (size_t)(colon - name) : strlen(name);
	int port = 0;
	if (colon) {
		const char *ps = colon + 1;
		if (!*ps || strspn(ps, "0123456789") != strlen(ps))
			return strchr(ps, ':') ? "is an address: addresses go in allowed_addresses"
					       : "has a port that is not a number";
		long v = strlen(ps) > 5 ? 0 : strtol(ps, NULL, 10);
		if (v < 1 || v > 65535)
			return "has a port out of range (1-65535)";
		port = (int)v;
	}
	if (n > 0 && name[n - 1] == '.')
		n--; /* a trailing dot is the same name */
	if (wildcard && n > 0 && name[0] == '*')
		return "has a '*' that is not a leading \"*.\" (\"*.*\" would allow everything)";
	const char *why = name_error(name, n);
	if (why)
		return why;
	char buf[CAE_NET_MAX_NAME + 1];
	memcpy(buf, name, n);
	buf[n] = '\0';
	if (is_ip_literal(buf))
		return "is an address: addresses go in allowed_addresses";
	if (wildcard && !strchr(buf, '.'))
		return "is a wildcard over a top-level domain: name a domain (*.example.com)";
	if (e) {
		for (size_t i = 0; i <= n; i++)
			e->name[i] = (char)tolower((unsigned char)buf[i]);
		e->wildcard = wildcard;
		e->port = port;
	}
	return NULL;
}

static const char *parse_cidr(const char *entry, struct cidr *c)
{
	if (!entry || !*entry)
		return "is empty";
	char buf[64];
	if (strlen(entry) >= sizeof(buf))
		return "is not an address or CIDR block";
	snprintf(buf, sizeof(buf), "%s", entry);
	char *slash = strchr(buf, '/');
	int prefix = -1;
	if (slash) {
		*slash = '\0';
		const char *ps = slash + 1;
		if (!*ps || strlen(ps) > 3 || strspn(ps, "0123456789") != strlen(ps))
			return "has a prefix length that is not a number";
		prefix = (int)strtol(ps, NULL, 10);
	}
	struct cidr tmp = {0};
	if (inet_pton(AF_INET, buf, tmp.addr) == 1)
		tmp.family = AF_INET;
	else if (inet_pton(AF_INET6, buf, tmp.addr) == 1)
		tmp.family = AF_INET6;
	else
		return "is not an IPv4 or IPv6 address (or CIDR block such as 127.0.0.0/8)";
	int max = tmp.family == AF_INET ? 32 : 128;
	if (prefix > max)
		return "has a prefix length out of range";
	tmp.prefix = prefix < 0 ? max : prefix;
	if (c)
		*c = tmp;
	return NULL;
}

const char *cae_net_domain_entry_error(const char *entry)
{
	return parse_domain(entry, NULL);
}

const char *cae_net_address_entry_error(const char *entry)
{
	return parse_cidr(entry, NULL);
}

bool cae_net_config_filtered(const cae_config *cfg)
{
	return cfg && (cfg->command_executor.docker.network.whitelist_mode ||
		       cfg->command_executor.docker.network.denied_domains.n > 0);
}

void cae_net_policy_free(cae_net_policy *p)
{
	if (!p)
		return;
	free(p->allowed);
	free(p->denied);
	free(p->cidrs);
	free(p);
}

static int parse_list(const char *key, const char *const *items, size_t n,
		      struct domain_entry **out, cae_error *err)
{
	*out = calloc(n ? n : 1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *why = parse_domain(items[i], &(*out)[i]);
		if (why)
			return cae_error_set(err, -EINVAL, "%s: item %zu %s", key, i + 1, why);
	}
	return 0;
}

int cae_net_policy_new(const cae_net_policy_spec *spec, cae_net_policy **out, cae_error *err)
{
	*out = NULL;
	cae_net_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->whitelist_mode = spec->whitelist_mode;
	int r =
	    parse_list("allowed_domains", spec->allowed_domains, spec->n_allowed, &p->allowed, err);
	if (r == 0)
		r = parse_list("denied_domains", spec->denied_domains, spec->n_denied, &p->denied,
			       err);
	p->n_allowed = spec->n_allowed;
	p->n_denied = spec->n_denied;
	if (r == 0) {
		p->cidrs = calloc(spec->n_addresses ? spec->n_addresses : 1, sizeof(*p->cidrs));
		r = p->cidrs ? 0 : -ENOMEM;
	}
	for (size_t i = 0; r == 0 && i < spec->n_addresses; i++) {
		const char *why = parse_cidr(spec->allowed_addresses[i], &p->cidrs[i]);
		if (why)
			r = cae_error_set(err, -EINVAL, "allowed_addresses: item %zu %s", i + 1,
					  why);
	}
	p->n_cidrs = spec->n_addresses;
	if (r < 0) {
		cae_net_policy_free(p);
		return r;
	}
	*out = p;
	return 0;
}

int cae_net_policy_from_config(const cae_config *cfg, cae_net_policy **out, cae_error *err)
{
	const __typeof__(cfg->command_executor.docker.network) *n =
	    &cfg->command_executor.docker.network;
	cae_net_policy_spec spec = {
	    .whitelist_mode = n->whitelist_mode,
	    .allowed_domains = (const char *const *)n->allowed_domains.items,
	    .n_allowed = n->allowed_domains.n,
	    .denied_domains = (const char *const *)n->denied_domains.items,
	    .n_denied = n->denied_domains.n,
	    .allowed_addresses = (const char *const *)n->allowed_addresses.items,
	    .n_addresses = n->allowed_addresses.n,
	};
	return cae_net_policy_new(&spec, out, err);
}

int cae_net_policy_for_forge(const cae_config *cfg, const char *forge, cae_net_policy **out,
			     cae_error *err)
{
	const __typeof__(cfg->command_executor.docker.network) *n =
	    &cfg->command_executor.docker.network;
	/* an IP literal is reached through allowed_addresses only, as any other */
	bool name = forge && cae_net_domain_entry_error(forge) == NULL;
	const char **allowed = calloc(n->allowed_domains.n + 1, sizeof(*allowed));
	if (!allowed)
		return cae_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n->allowed_domains.n; i++)
		allowed[i] = n->allowed_domains.items[i];
	if (name)
		allowed[n->allowed_domains.n] = forge;
	cae_net_policy_spec spec = {
	    /* without an allow-list of its own, the environment has no network but the forge */
	    .whitelist_mode = n->whitelist_mode || !cae_net_config_filtered(cfg),
	    .allowed_domains = allowed,
	    .n_allowed = n->allowed_domains.n + (name ? 1 : 0),
	    .denied_domains = (const char *const *)n->denied_domains.items,
	    .n_denied = n->denied_domains.n,
	    .allowed_addresses = (const char *const *)n->allowed_addresses.items,
	    .n_addresses = n->allowed_addresses.n,
	};
	int r = cae_net_policy_new(&spec, out, err);
	free(allowed);
	return r;
}

const char *cae_net_verdict_rule(cae_net_verdict v)
{
	switch (v) {
	case CAE_NET_ALLOW:
		return "";
	case CAE_NET_DENY_NOT_ALLOWED:
		return "allowed_domains";
	case CAE_NET_DENY_DENIED:
		return "denied_domains";
	case CAE_NET_DENY_LITERAL:
	case CAE_NET_DENY_ADDRESS:
		return "allowed_addresses";
	case CAE_NET_DENY_BAD_NAME:
		break;
	}
	return "bad_request";
}

static bool entry_matches(const struct domain_entry *e, const char *host, size_t hl, int port)
{
	if (e->port && e->port != port)
		return false;
	size_t el = strlen(e->name);
	if (!e->wildcard)
		return hl == el && memcmp(host, e->name, el) == 0;
	/* *.example.com: a.example.com, a.b.example.com; not example.com */
	return hl > el + 1 && host[hl - el - 1] == '.' && memcmp(host + hl - el, e->name, el) == 0;
}

static bool cidr_contains(const struct cidr *c, int family, const unsigned char *addr)
{
	if (c->family != family)
		return false;
	int full = c->prefix / 8, rest = c->prefix % 8;
	if (memcmp(c->addr, addr, (size_t)full) != 0)
		return false;
	if (rest == 0)
		return true;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));
	return (c->addr[full] & mask) == (addr[full] & mask);
}

/* What an IPv4 address is when it is not a public unicast one, NULL when it is. */
static const char *v4_kind(const unsigned char *a)
{
	if (a[0] == 127)
		return "loopback";
	if (a[0] == 169 && a[1] == 254)
		return a[2] == 169 && a[3] == 254 ? "metadata" : "link-local";
	if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168))
		return "private";
	if (a[0] == 100 && (a[1] & 0xc0) == 64)
		return "shared (carrier-grade NAT)";
	if (a[0] == 0)
		return "unspecified";
	if (a[0] >= 224)
		return a[0] < 240 ? "multicast" : "reserved";
	if ((a[0] == 192 && a[1] == 0 && a[2] == 0) || (a[0] == 198 && (a[1] & 0xfe) == 18))
		return "reserved";
	return NULL;
}

static const char *v6_kind(const unsigned char *a)
{
	static const unsigned char zero[16];
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
	if (memcmp(a, zero, 15) == 0)
		return a[15] == 1 ? "loopback" : a[15] == 0 ? "unspecified" : "reserved";
	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0 || memcmp(a, zero, 12) == 0)
		return v4_kind(a + 12)		  ? v4_kind(a + 12)
		       : memcmp(a, zero, 12) == 0 ? "reserved"
						  : NULL;
	if ((a[0] & 0xfe) == 0xfc)
		return "unique-local";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return "link-local";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
		return "site-local";
	if (a[0] == 0xff)
		return "multicast";
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
		return "reserved";
	if (a[0] == 0x01 && a[1] == 0 && memcmp(a + 2, zero, 6) == 0)
		return "reserved"; /* 100::/64, discard */
	return NULL;
}

static bool in_allowed(const cae_net_policy *p, int family, const unsigned char *addr)
{
	for (size_t i = 0; i < p->n_cidrs; i++)
		if (cidr_contains(&p->cidrs[i], family, addr))
			return true;
	/* ::ffff:a.b.c.d is a.b.c.d */
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (family == AF_INET6 && memcmp(addr, mapped, 12) == 0)
		return in_allowed(p, AF_INET, addr + 12);
	return false;
}

bool cae_net_policy_address_ok(const cae_net_policy *p, const struct sockaddr *sa,
			       const char **kind)
{
	const unsigned char *addr;
	const char *k;
	if (sa->sa_family == AF_INET) {
		addr = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)
			   ->sin_addr;
		k = v4_kind(addr);
	} else if (sa->sa_family == AF_INET6) {
		addr = (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)sa)
			   ->sin6_addr;
		k = v6_kind(addr);
	} else {
		if (kind)
			*kind = "not an internet address";
		return false;
	}
	if (in_allowed(p, sa->sa_family, addr))
		return true;
	if (kind)
		*kind = k;
	return k == NULL;
}

cae_net_verdict cae_net_policy_check(const cae_net_policy *p, const char *host, int port, char *why,
				     size_t why_size)
{
	char dummy[8];
	if (!why) {
		why = dummy;
		why_size = sizeof(dummy);
	}
	why[0] = '\0';
	size_t hl = host ? strlen(host) : 0;
	if (hl && host[hl - 1] == '.')
		hl--;
	if (port < 1 || port > 65535 || hl == 0 || hl > CAE_NET_MAX_NAME) {
		snprintf(why, why_size, "the request names no valid host and port");
		return CAE_NET_DENY_BAD_NAME;
	}
	char name[CAE_NET_MAX_NAME + 1];
	for (size_t i = 0; i < hl; i++)
		name[i] = (char)tolower((unsigned char)host[i]);
	name[hl] = '\0';
	if (is_ip_literal(name)) {
		unsigned char a[16];
		struct in_addr a4;
		bool ok = false;
		if (inet_pton(AF_INET6, name, a) == 1)
			ok = in_allowed(p, AF_INET6, a);
		else if (inet_pton(AF_INET, name, a) == 1)
			ok = in_allowed(p, AF_INET, a);
		else if (inet_aton(name, &a4)) /* a number that is not dotted-quad: refused */
			ok = false;
		if (ok)
			return CAE_NET_ALLOW;
		snprintf(why, why_size, "%s is an IP address, not in allowed_addresses", name);
		return CAE_NET_DENY_LITERAL;
	}
	if (name_error(name, hl)) {
		snprintf(why, why_size, "the request names no valid host");
		return CAE_NET_DENY_BAD_NAME;
	}
	for (size_t i = 0; i < p->n_denied; i++)
		if (entry_matches(&p->denied[i], name, hl, port)) {
			snprintf(why, why_size, "%s is in denied_domains", name);
			return CAE_NET_DENY_DENIED;
		}
	if (!p->whitelist_mode)
		return CAE_NET_ALLOW;
	for (size_t i = 0; i < p->n_allowed; i++)
		if (entry_matches(&p->allowed[i], name, hl, port))
			return CAE_NET_ALLOW;
	bool other_port = false;
	for (size_t i = 0; i < p->n_allowed && !other_port; i++) {
		struct domain_entry any = p->allowed[i];
		any.port = 0;
		other_port = entry_matches(&any, name, hl, port);
	}
	if (other_port)
		snprintf(why, why_size, "%s port %d is not in allowed_domains", name, port);
	else
		snprintf(why, why_size, "%s is not in allowed_domains", name);
	return CAE_NET_DENY_NOT_ALLOWED;
}
