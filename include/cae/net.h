/* cae's network policy and its filtering proxy (src/net/).
 *
 * The policy is one for every backend: command_executor.docker.network.* (see cae/config.h).
 * It decides by the name the client asked for (an HTTP CONNECT host, an absolute URL's or the
 * Host header's host, a SOCKS5 domain), never by what the environment resolved:
 *   - a name in denied_domains is refused, whatever else says;
 *   - with whitelist_mode, only names in allowed_domains pass; without it, every name not
 *     denied passes;
 *   - an IP literal is refused unless the address is in allowed_addresses;
 *   - a name that passes is resolved by the proxy, and every address it resolves to that is
 *     loopback, private, link-local, unique-local, multicast, reserved or a cloud metadata
 *     address is skipped unless it is in allowed_addresses; the connection goes to the very
 *     address checked (no second resolution between check and connect).
 * Entries of the domain lists: an exact name ("registry.npmjs.org"), or "*.example.com" (any
 * name below example.com, not example.com itself: list it too), each with an optional ":port"
 * (1-65535; without one, every port). Case does not matter; a trailing dot is ignored.
 * allowed_addresses: IPv4 or IPv6 addresses or CIDR blocks ("127.0.0.1", "10.0.0.0/8",
 * "fd00::/8").
 *
 * The proxy serves, on one byte stream per client (any connected socket: a TCP connection the
 * environment's helper accepted on its loopback, one end of a socket pair...), either an HTTP
 * proxy request (CONNECT host:port, or a plain request in absolute form, or in origin form
 * with a Host header) or SOCKS5 (no authentication; CONNECT to a domain, IPv4 or IPv6). The
 * first byte tells which (0x05: SOCKS5). A refusal is answered with "HTTP/1.1 403 Forbidden"
 * whose body names the host and the rule ("blocked by cae network policy: example.org is not
 * in allowed_domains"), or the SOCKS5 reply 0x02 (connection not allowed by ruleset; SOCKS has
 * no room for text); it is logged as the event network.denied {task, host, port, rule} and
 * counted in the proxy's record of refusals (cae_net_proxy_take_denied). Request bodies and
 * headers are never logged. */
#ifndef CAE_NET_H
#define CAE_NET_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cae/config.h"
#include "cae/error.h"
#include "cae/log.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_NET_HTTP_PORT 3128	/* where an environment's helper listens for HTTP proxying */
#define CAE_NET_SOCKS_PORT 1080 /* ... and for SOCKS5 */
#define CAE_NET_MAX_NAME 253

/* Why an entry of allowed_domains / denied_domains is malformed, NULL when it is well-formed. */
CAE_EXPORT const char *cae_net_domain_entry_error(const char *entry);
/* Why an entry of allowed_addresses is malformed, NULL when it is well-formed. */
CAE_EXPORT const char *cae_net_address_entry_error(const char *entry);

/* Whether cfg asks for the filtering proxy: whitelist_mode, or any denied_domains. */
CAE_EXPORT bool cae_net_config_filtered(const cae_config *cfg);

typedef struct cae_net_policy cae_net_policy;

typedef struct cae_net_policy_spec {
	bool whitelist_mode; /* true: only allowed_domains; false: every name not denied */
	const char *const *allowed_domains;
	size_t n_allowed;
	const char *const *denied_domains;
	size_t n_denied;
	const char *const *allowed_addresses; /* CIDRs */
	size_t n_addresses;
} cae_net_policy_spec;

/* A new policy from spec (entries are copied). -EINVAL with err naming a malformed entry. */
CAE_EXPORT int cae_net_policy_new(const cae_net_policy_spec *spec, cae_net_policy **out,
				  cae_error *err);
/* The same from command_executor.docker.network. */
CAE_EXPORT int cae_net_policy_from_config(const cae_config *cfg, cae_net_policy **out,
					  cae_error *err);
/* The forge rule: the policy of an environment that may reach forge ("host:port", the forge
 * it was cloned from; NULL: none) besides what the configuration allows. Without an
 * allow-list or denied_domains configured (a network that is otherwise none), only forge
 * passes; with an allow-list, forge is added to it; denied_domains still wins, and the
 * address rules hold for forge too (an IP literal or a loopback or private forge passes only
 * through allowed_addresses). */
CAE_EXPORT int cae_net_policy_for_forge(const cae_config *cfg, const char *forge,
					cae_net_policy **out, cae_error *err);
CAE_EXPORT void cae_net_policy_free(cae_net_policy *p); /* accepts NULL */

typedef enum cae_net_verdict {
	CAE_NET_ALLOW = 0,
	CAE_NET_DENY_NOT_ALLOWED, /* not in allowed_domains */
	CAE_NET_DENY_DENIED,	  /* in denied_domains */
	CAE_NET_DENY_LITERAL,	  /* an IP literal not in allowed_addresses */
	CAE_NET_DENY_ADDRESS,	  /* resolves only to addresses not to be reached */
	CAE_NET_DENY_BAD_NAME,	  /* not a host name */
} cae_net_verdict;

/* The rule a verdict names in events: "allowed_domains", "denied_domains",
 * "allowed_addresses", "bad_request". */
CAE_EXPORT const char *cae_net_verdict_rule(cae_net_verdict v);

/* Decides for host (a name or an IP literal, IPv6 without brackets) and port, before any
 * resolution. why (may be NULL) gets the refusal's text without the "blocked by" prefix
 * ("example.org is not in allowed_domains"). */
CAE_EXPORT cae_net_verdict cae_net_policy_check(const cae_net_policy *p, const char *host, int port,
						char *why, size_t why_size);

/* Whether an address may be connected to: a public unicast address, or one in
 * allowed_addresses. When not, kind (may be NULL) gets what it is ("loopback", "private",
 * "link-local", "metadata", ...). */
CAE_EXPORT bool cae_net_policy_address_ok(const cae_net_policy *p, const struct sockaddr *sa,
					  const char **kind);

/* ---- the proxy ---- */

typedef struct cae_net_proxy cae_net_proxy;

typedef struct cae_net_proxy_options {
	const char *task;	    /* named in events (copied; may be NULL) */
	int max_connections;	    /* 64: clients served at once; more are closed at once */
	size_t buffer_size;	    /* 65536 bytes per direction and connection (the splice
				     * pipe's size, grown to 256 KiB for a bulk transfer) */
	int64_t header_timeout_ms;  /* 10000: a client's request must arrive within this */
	int64_t connect_timeout_ms; /* 10000 */
	size_t max_denied;	    /* 64 distinct (host, port) kept in the refusal record */
} cae_net_proxy_options;

CAE_EXPORT void cae_net_proxy_options_init(cae_net_proxy_options *o);

/* A new proxy applying policy (taken over: freed with the proxy, and on failure); log (may
 * be NULL) gets network.denied events and must outlive the proxy. */
CAE_EXPORT int cae_net_proxy_new(cae_net_policy *policy, const cae_net_proxy_options *o,
				 cae_log *log, cae_net_proxy **out, cae_error *err);

/* Serves one client on fd (a connected stream socket, taken over) in a thread of its own.
 * Returns 0, or -EAGAIN when max_connections clients are being served (fd is closed), or
 * -errno. */
CAE_EXPORT int cae_net_proxy_serve_fd(cae_net_proxy *px, int fd);

/* Accepts clients on a listening socket fd (taken over) in a thread of the proxy, each
 * served as by cae_net_proxy_serve_fd, until the proxy is freed. Returns 0 or -errno. */
CAE_EXPORT int cae_net_proxy_listen_fd(cae_net_proxy *px, int fd);

/* The refusals since the previous call, [{host, port, count}] in the order first seen, and
 * resets the record; NULL when there were none. */
CAE_EXPORT json_t *cae_net_proxy_take_denied(cae_net_proxy *px);

/* Clients being served now. */
CAE_EXPORT int cae_net_proxy_active(cae_net_proxy *px);

/* Ends every client's connection and listener, waits for its threads, frees. Accepts NULL. */
CAE_EXPORT void cae_net_proxy_free(cae_net_proxy *px);

/* The proxy variables an environment's commands get ("K=V", static strings, NULL-ended):
 * HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY in both cases, for the helper's ports on
 * 127.0.0.1. */
CAE_EXPORT const char *const *cae_net_proxy_env(void);

/* ---- parsing, exposed for the fuzz target ---- */

typedef enum cae_net_request_kind {
	CAE_NET_REQ_INCOMPLETE = 0, /* more bytes are needed */
	CAE_NET_REQ_BAD,	    /* malformed: refused */
	CAE_NET_REQ_CONNECT,	    /* HTTP CONNECT: tunnel */
	CAE_NET_REQ_FORWARD,	    /* plain HTTP: forward the rewritten head, then relay */
	CAE_NET_REQ_SOCKS_GREETING, /* a SOCKS5 greeting: answer with the method */
	CAE_NET_REQ_SOCKS_CONNECT,  /* a SOCKS5 CONNECT */
	CAE_NET_REQ_SOCKS_BADCMD,   /* a SOCKS5 command other than CONNECT */
} cae_net_request_kind;

typedef struct cae_net_request {
	cae_net_request_kind kind;
	size_t consumed;		 /* bytes of the input this request took */
	char host[CAE_NET_MAX_NAME + 1]; /* lower case; an IPv6 literal without brackets */
	int port;
	bool socks_no_auth; /* greeting: the client offers "no authentication" */
	bool socks_literal; /* SOCKS: the host was given as an address */
	char *head;	    /* FORWARD: the request head to send upstream (new) */
	size_t head_len;
} cae_net_request;

/* Parses the first request in data[0..len) (socks: a SOCKS5 client after its greeting was
 * answered). Frees nothing it was given; req->head must be freed by the caller. */
CAE_EXPORT void cae_net_parse_request(const char *data, size_t len, bool socks,
				      cae_net_request *req);

#ifdef __cplusplus
}
#endif
#endif
