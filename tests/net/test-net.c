/* Tests of the network policy and its proxy (include/cae/net.h): entry syntax, matching by the
 * name asked for, which addresses may be reached; the proxy against real loopback servers
 * (HTTP CONNECT, plain HTTP, SOCKS5 by name, IPv4 and IPv6), its refusals (a name not
 * listed, a denied name, an IP literal, a name resolving to loopback), garbage, a silent
 * client, the per-environment bound, and 10,000 connections with memory bounded; megabytes
 * each way through the relay, whole, with what waits for the client bounded. And the
 * handover of a container's listeners over a unix socket (src/backend/net-handover.h), as an
 * attacker in the container would try it: a wrong token, listeners that are not the
 * proxy's, more descriptors, none are taken. */
#include "backend/net-handover.h"
#include "base/macro.h"
#include "helper/proto.h"
#include "cae/log.h"
#include "cae/net.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

/* ---- policy ---- */

static const char *const bad_domains[] = {
    "",
    " example.com",
    "example.com ",
    "exa mple.com",
    "*.*",
    "*",
    "*.com",
    "a.*.example.com",
    "http://example.com",
    "example.com/path",
    "example.com:0",
    "example.com:65536",
    "example.com:x",
    "example.com:",
    "a..b",
    "-a.example.com",
    "1.2.3.4",
    "[::1]",
    "user@example.com",
    "exa\tmple.com",
};

START_TEST(domain_entries_malformed)
{
	const char *e = bad_domains[_i];
	ck_assert_msg(cae_net_domain_entry_error(e) != NULL, "accepted: \"%s\"", e);
}
END_TEST

START_TEST(domain_entries_wellformed)
{
	const char *good[] = {"example.com",	      "*.example.com", "a.example.com:443",
			      "EXAMPLE.com.",	      "localhost",     "registry.npmjs.org:1",
			      "x_y.example.com:65535"};
	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		ck_assert_msg(cae_net_domain_entry_error(good[i]) == NULL, "refused %s: %s",
			      good[i], cae_net_domain_entry_error(good[i]));
}
END_TEST

START_TEST(address_entries)
{
	const char *good[] = {"127.0.0.1", "10.0.0.0/8", "fd00::/8", "::1", "0.0.0.0/0", "::/0"};
	const char *bad[] = {"",	   "1.2.3.4/33", "::1/129",	"a.b",	      "10.0.0.0/",
			     "10.0.0.0/x", "localhost",	 "10.0.0.0/8 ", "1.2.3.4/-1", "1.2.3"};
	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		ck_assert_msg(cae_net_address_entry_error(good[i]) == NULL, "refused %s", good[i]);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(cae_net_address_entry_error(bad[i]) != NULL, "accepted \"%s\"",
			      bad[i]);
}
END_TEST

static cae_net_policy *policy(bool whitelist, const char *const *allowed, size_t na,
			      const char *const *denied, size_t nd, const char *const *addrs,
			      size_t nad)
{
	cae_net_policy_spec spec = {whitelist, allowed, na, denied, nd, addrs, nad};
	cae_net_policy *p = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_net_policy_new(&spec, &p, &err) == 0, "%s", err.message);
	return p;
}

START_TEST(matching)
{
	const char *allowed[] = {"example.com", "*.npmjs.org", "git.example.net:443"};
	const char *denied[] = {"bad.npmjs.org"};
	const char *addrs[] = {"127.0.0.1/32"};
	cae_net_policy *p = policy(true, allowed, 3, denied, 1, addrs, 1);
	char why[512];
	ck_assert_int_eq(cae_net_policy_check(p, "example.com", 80, why, sizeof(why)),
			 CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "EXAMPLE.COM.", 443, why, sizeof(why)),
			 CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "sub.example.com", 80, why, sizeof(why)),
			 CAE_NET_DENY_NOT_ALLOWED);
	ck_assert_str_eq(why, "sub.example.com is not in allowed_domains");
	ck_assert_int_eq(cae_net_policy_check(p, "notexample.com", 80, NULL, 0),
			 CAE_NET_DENY_NOT_ALLOWED);
	ck_assert_int_eq(cae_net_policy_check(p, "registry.npmjs.org", 443, NULL, 0),
			 CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "a.b.npmjs.org", 443, NULL, 0), CAE_NET_ALLOW);
	/* the apex only when listed */
	ck_assert_int_eq(cae_net_policy_check(p, "npmjs.org", 443, NULL, 0),
			 CAE_NET_DENY_NOT_ALLOWED);
	ck_assert_int_eq(cae_net_policy_check(p, "bad.npmjs.org", 443, why, sizeof(why)),
			 CAE_NET_DENY_DENIED);
	ck_assert_str_eq(why, "bad.npmjs.org is in denied_domains");
	ck_assert_int_eq(cae_net_policy_check(p, "git.example.net", 443, NULL, 0), CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "git.example.net", 22, why, sizeof(why)),
			 CAE_NET_DENY_NOT_ALLOWED);
	ck_assert_str_eq(why, "git.example.net port 22 is not in allowed_domains");
	/* IP literals: only what allowed_addresses lists, in every spelling */
	ck_assert_int_eq(cae_net_policy_check(p, "93.184.216.34", 80, why, sizeof(why)),
			 CAE_NET_DENY_LITERAL);
	ck_assert_str_eq(why, "93.184.216.34 is an IP address, not in allowed_addresses");
	ck_assert_int_eq(cae_net_policy_check(p, "127.0.0.1", 80, NULL, 0), CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "127.1", 80, NULL, 0), CAE_NET_DENY_LITERAL);
	ck_assert_int_eq(cae_net_policy_check(p, "2130706433", 80, NULL, 0), CAE_NET_DENY_LITERAL);
	ck_assert_int_eq(cae_net_policy_check(p, "::1", 80, NULL, 0), CAE_NET_DENY_LITERAL);
	ck_assert_int_eq(cae_net_policy_check(p, "::ffff:127.0.0.1", 80, NULL, 0), CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "example.com", 0, NULL, 0), CAE_NET_DENY_BAD_NAME);
	ck_assert_int_eq(cae_net_policy_check(p, "exa mple.com", 80, NULL, 0),
			 CAE_NET_DENY_BAD_NAME);
	ck_assert_str_eq(cae_net_verdict_rule(CAE_NET_DENY_NOT_ALLOWED), "allowed_domains");
	cae_net_policy_free(p);

	/* without whitelist_mode: every name but the denied ones */
	p = policy(false, NULL, 0, denied, 1, NULL, 0);
	ck_assert_int_eq(cae_net_policy_check(p, "anything.org", 443, NULL, 0), CAE_NET_ALLOW);
	ck_assert_int_eq(cae_net_policy_check(p, "bad.npmjs.org", 443, NULL, 0),
			 CAE_NET_DENY_DENIED);
	cae_net_policy_free(p);

	const char *worse[] = {"ok.example.com", "*.*"};
	cae_net_policy_spec spec = {true, worse, 2, NULL, 0, NULL, 0};
	cae_error err = {0};
	ck_assert_int_eq(cae_net_policy_new(&spec, &p, &err), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err.message, "allowed_domains: item 2"), "%s", err.message);
}
END_TEST

static bool addr_ok(const cae_net_policy *p, const char *a, const char **kind)
{
	struct sockaddr_storage ss = {0};
	if (strchr(a, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		ck_assert_int_eq(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		ck_assert_int_eq(inet_pton(AF_INET, a, &s4->sin_addr), 1);
	}
	return cae_net_policy_address_ok(p, (struct sockaddr *)&ss, kind);
}

START_TEST(addresses)
{
	cae_net_policy *p = policy(true, NULL, 0, NULL, 0, NULL, 0);
	const char *refused[] = {"127.0.0.1",
				 "127.8.9.10",
				 "10.1.2.3",
				 "172.16.0.1",
				 "172.31.255.255",
				 "192.168.1.1",
				 "169.254.169.254",
				 "169.254.1.1",
				 "100.64.0.1",
				 "0.0.0.0",
				 "224.0.0.1",
				 "255.255.255.255",
				 "::1",
				 "::",
				 "fd00::1",
				 "fc00::1",
				 "fe80::1",
				 "::ffff:127.0.0.1",
				 "::ffff:10.0.0.1",
				 "64:ff9b::a00:1",
				 "ff02::1",
				 "fd00:ec2::254"};
	const char *kind = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		ck_assert_msg(!addr_ok(p, refused[i], &kind) && kind, "reachable: %s", refused[i]);
	ck_assert(!addr_ok(p, "169.254.169.254", &kind));
	ck_assert_str_eq(kind, "metadata");
	ck_assert(!addr_ok(p, "127.0.0.1", &kind));
	ck_assert_str_eq(kind, "loopback");
	const char *public[] = {"8.8.8.8", "172.32.0.1", "93.184.216.34", "2606:4700::1111"};
	for (size_t i = 0; i < ARRAY_SIZE(public); i++)
		ck_assert_msg(addr_ok(p, public[i], NULL), "refused: %s", public[i]);
	cae_net_policy_free(p);
	const char *addrs[] = {"127.0.0.0/8", "fd00::/8"};
	p = policy(true, NULL, 0, NULL, 0, addrs, 2);
	ck_assert(addr_ok(p, "127.0.0.1", NULL));
	ck_assert(addr_ok(p, "::ffff:127.0.0.1", NULL));
	ck_assert(addr_ok(p, "fd00::1", NULL));
	ck_assert(!addr_ok(p, "::1", NULL));
	ck_assert(!addr_ok(p, "10.0.0.1", NULL));
	cae_net_policy_free(p);
}
END_TEST

/* ---- the proxy against loopback servers ---- */

/* A server on 127.0.0.1 (or ::1): answers every connection with 200 and the request head it
 * received, then closes. */
struct server {
	int fd;
	int port;
	pthread_t t;
};

static void *server_main(void *arg)
{
	struct server *s = arg;
	for (;;) {
		int c = accept(s->fd, NULL, NULL);
		if (c < 0)
			return NULL;
		char buf[8192];
		size_t n = 0;
		while (n < sizeof(buf) - 1) {
			ssize_t k = read(c, buf + n, sizeof(buf) - 1 - n);
			if (k <= 0)
				break;
			n += (size_t)k;
			buf[n] = '\0';
			if (strstr(buf, "\r\n\r\n"))
				break;
		}
		char head[256];
		int hl = snprintf(
		    head, sizeof(head),
		    "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", n);
		(void)!write(c, head, (size_t)hl);
		(void)!write(c, buf, n);
		close(c);
	}
}

static struct server *server_start(int family)
{
	static struct server servers[4];
	static int used;
	ck_assert_int_lt(used, 4);
	struct server *s = &servers[used++];
	s->fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(s->fd, 0);
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		sl = sizeof(*a);
	}
	ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&ss, sl), 0);
	ck_assert_int_eq(listen(s->fd, 256), 0);
	ck_assert_int_eq(getsockname(s->fd, (struct sockaddr *)&ss, &sl), 0);
	s->port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					  : ((struct sockaddr_in6 *)&ss)->sin6_port);
	ck_assert_int_eq(pthread_create(&s->t, NULL, server_main, s), 0);
	return s;
}

static int log_fd = -1;
static cae_log *test_log;

static cae_net_proxy *proxy_with(const char *const *allowed, size_t na, const char *const *addrs,
				 size_t nad, const cae_net_proxy_options *o)
{
	if (!test_log) {
		log_fd = memfd_create("log", MFD_CLOEXEC);
		test_log = cae_log_new(log_fd, CAE_LOG_DEBUG);
	}
	cae_net_policy *p = policy(true, allowed, na, NULL, 0, addrs, nad);
	cae_net_proxy *px = NULL;
	cae_error err = {0};
	cae_net_proxy_options def;
	cae_net_proxy_options_init(&def);
	def.task = "T1";
	ck_assert_int_eq(cae_net_proxy_new(p, o ? o : &def, test_log, &px, &err), 0);
	return px;
}

static char *log_text(void)
{
	static char buf[1 << 16];
	ssize_t n = pread(log_fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* A client of px: one end of a socket pair, the other served by the proxy. */
static int client(cae_net_proxy *px)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(cae_net_proxy_serve_fd(px, sv[1]), 0);
	return sv[0];
}

static void say(int fd, const void *p, size_t n)
{
	ck_assert_int_eq(cae__write_all(fd, p, n), 0);
}

/* Reads until n bytes or end of file. */
static size_t hear(int fd, char *buf, size_t size, size_t want)
{
	size_t n = 0;
	while (n < want && n < size - 1) {
		ssize_t k = read(fd, buf + n, size - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	buf[n] = '\0';
	return n;
}

static const char *const local_names[] = {"localhost"};
static const char *const loopback_v4[] = {"127.0.0.1/32"};

START_TEST(http_connect_to_allowed_name)
{
	struct server *s = server_start(AF_INET);
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	int fd = client(px);
	char req[256], buf[4096];
	int n = snprintf(req, sizeof(req),
			 "CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n", s->port,
			 s->port);
	say(fd, req, (size_t)n);
	hear(fd, buf, sizeof(buf), 39);
	ck_assert_str_eq(buf, "HTTP/1.1 200 Connection established\r\n\r\n");
	say(fd, "GET /through HTTP/1.1\r\nHost: localhost\r\n\r\n", 42);
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "200 OK") && strstr(buf, "GET /through HTTP/1.1"), "%s", buf);
	close(fd);
	ck_assert_ptr_null(cae_net_proxy_take_denied(px));
	cae_net_proxy_free(px);
}
END_TEST

START_TEST(http_forward_rewrites_the_head)
{
	struct server *s = server_start(AF_INET);
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	int fd = client(px);
	char req[512], buf[4096];
	int n = snprintf(req, sizeof(req),
			 "GET http://LocalHost:%d/path?q=1 HTTP/1.1\r\nHost: evil.example\r\n"
			 "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n"
			 "X-Kept: yes\r\n\r\n",
			 s->port);
	say(fd, req, (size_t)n);
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	char host[64];
	snprintf(host, sizeof(host), "Host: localhost:%d\r\n", s->port);
	ck_assert_msg(strstr(buf, "200 OK") && strstr(buf, "GET /path?q=1 HTTP/1.1\r\n") &&
			  strstr(buf, host) && strstr(buf, "X-Kept: yes") &&
			  strstr(buf, "Connection: close") && !strstr(buf, "evil") &&
			  !strstr(buf, "Proxy-"),
		      "%s", buf);
	close(fd);
	/* origin form with a Host header decides by that Host */
	fd = client(px);
	n = snprintf(req, sizeof(req), "GET /o HTTP/1.0\r\nHost: localhost:%d\r\n\r\n", s->port);
	say(fd, req, (size_t)n);
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "GET /o HTTP/1.0"), "%s", buf);
	close(fd);
	cae_net_proxy_free(px);
}
END_TEST

static void socks_connect(int fd, unsigned char atyp, const void *addr, size_t alen, int port,
			  unsigned char *reply)
{
	say(fd, "\x05\x01\x00", 3);
	char m[3];
	ck_assert_uint_eq(hear(fd, m, sizeof(m), 2), 2);
	ck_assert(m[0] == 5 && m[1] == 0);
	unsigned char req[300] = {5, 1, 0, atyp};
	size_t n = 4;
	if (atyp == 3)
		req[n++] = (unsigned char)alen;
	memcpy(req + n, addr, alen);
	n += alen;
	req[n++] = (unsigned char)(port >> 8);
	req[n++] = (unsigned char)port;
	say(fd, req, n);
	char r[11];
	ck_assert_uint_eq(hear(fd, r, sizeof(r), 10), 10);
	memcpy(reply, r, 10);
}

START_TEST(socks5_by_name_ipv4_ipv6)
{
	struct server *s4 = server_start(AF_INET);
	struct server *s6 = server_start(AF_INET6);
	const char *addrs[] = {"127.0.0.1/32", "::1/128"};
	cae_net_proxy *px = proxy_with(local_names, 1, addrs, 2, NULL);
	unsigned char rep[10];
	char buf[4096];
	int fd = client(px);
	socks_connect(fd, 3, "localhost", 9, s4->port, rep);
	ck_assert_int_eq(rep[1], 0);
	say(fd, "GET /socks HTTP/1.1\r\n\r\n", 23);
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "GET /socks"), "%s", buf);
	close(fd);
	unsigned char v4[4] = {127, 0, 0, 1};
	fd = client(px);
	socks_connect(fd, 1, v4, 4, s4->port, rep);
	ck_assert_int_eq(rep[1], 0);
	close(fd);
	fd = client(px);
	socks_connect(fd, 4, &in6addr_loopback, 16, s6->port, rep);
	ck_assert_int_eq(rep[1], 0);
	say(fd, "GET /six HTTP/1.1\r\n\r\n", 21);
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "GET /six"), "%s", buf);
	close(fd);
	cae_net_proxy_free(px);
	/* without allowed_addresses, the same literal is refused: "not allowed by ruleset" */
	px = proxy_with(local_names, 1, NULL, 0, NULL);
	fd = client(px);
	socks_connect(fd, 1, v4, 4, s4->port, rep);
	ck_assert_int_eq(rep[1], 2);
	close(fd);
	json_t *d = cae_net_proxy_take_denied(px);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(d, 0), "host")),
			 "127.0.0.1");
	json_decref(d);
	cae_net_proxy_free(px);
}
END_TEST

/* Sends req, returns the whole answer (the proxy closes after a refusal). */
static char *ask(cae_net_proxy *px, const char *req)
{
	static char buf[8192];
	int fd = client(px);
	say(fd, req, strlen(req));
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	close(fd);
	return buf;
}

START_TEST(refusals)
{
	struct server *s = server_start(AF_INET);
	cae_net_proxy *px = proxy_with(local_names, 1, NULL, 0, NULL);
	char *a = ask(px, "CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n");
	ck_assert_msg(strncmp(a, "HTTP/1.1 403 Forbidden\r\n", 24) == 0 &&
			  strstr(a, "blocked by cae network policy: example.org is not in "
				    "allowed_domains"),
		      "%s", a);
	a = ask(px, "GET http://example.org/x HTTP/1.1\r\nHost: example.org\r\n\r\n");
	ck_assert_msg(strstr(a, "403") && strstr(a, "example.org is not in allowed_domains"), "%s",
		      a);
	char req[256];
	snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", s->port);
	a = ask(px, req);
	ck_assert_msg(strstr(a, "403") && strstr(a, "127.0.0.1 is an IP address, not in "
						    "allowed_addresses"),
		      "%s", a);
	/* an allowed name that resolves to loopback: refused without allowed_addresses */
	snprintf(req, sizeof(req), "CONNECT localhost:%d HTTP/1.1\r\n\r\n", s->port);
	a = ask(px, req);
	ck_assert_msg(strstr(a, "403") && strstr(a, "localhost resolves to ") &&
			  strstr(a, "a loopback address not in allowed_addresses"),
		      "%s", a);
	json_t *d = cae_net_proxy_take_denied(px);
	ck_assert_uint_eq(json_array_size(d), 4);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(d, 0), "host")),
			 "example.org");
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(d, 0), "port")), 443);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(d, 0), "count")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(d, 1), "port")), 80);
	json_decref(d);
	ck_assert_ptr_null(cae_net_proxy_take_denied(px)); /* taken: reset */
	const char *log = log_text();
	ck_assert_msg(strstr(log, "\"network.denied\"") &&
			  strstr(log, "\"rule\":\"allowed_domains\"") &&
			  strstr(log, "\"rule\":\"allowed_addresses\"") &&
			  strstr(log, "\"task\":\"T1\"") && strstr(log, "\"host\":\"example.org\""),
		      "%s", log);
	cae_net_proxy_free(px);
}
END_TEST

START_TEST(garbage_is_refused_cleanly)
{
	cae_net_proxy *px = proxy_with(local_names, 1, NULL, 0, NULL);
	const char *http_bad[] = {
	    "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
	    "GET / HTTP/1.1\r\n\r\n", /* no host */
	    "GET http://user:pw@localhost/ HTTP/1.1\r\n\r\n",
	    "CONNECT localhost HTTP/1.1\r\n\r\n", /* no port */
	    "CONNECT localhost:99999 HTTP/1.1\r\n\r\n",
	    "GET /x HTTP/1.1\r\nHost: a.example\r\nHost: localhost\r\n\r\n",
	    "\x04\x01\x00\x50\x7f\x00\x00\x01\x00\r\n\r\n", /* SOCKS4 */
	    "GET https://localhost/ HTTP/1.1\r\n\r\n",
	    "G\x01T / HTTP/1.1\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(http_bad); i++) {
		char *a = ask(px, http_bad[i]);
		ck_assert_msg(strncmp(a, "HTTP/1.1 400 Bad Request", 24) == 0, "%zu: %s", i, a);
	}
	/* an unfinished head bigger than the buffer */
	int fd = client(px);
	char big[70000];
	memset(big, 'a', sizeof(big));
	say(fd, "GET /", 5);
	(void)send(fd, big, sizeof(big), MSG_NOSIGNAL);
	char buf[512];
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "400"), "%s", buf);
	close(fd);
	/* SOCKS5: no acceptable method, a command other than CONNECT */
	fd = client(px);
	say(fd, "\x05\x01\x02", 3);
	ck_assert_uint_eq(hear(fd, buf, sizeof(buf), SIZE_MAX), 2);
	ck_assert(buf[0] == 5 && (unsigned char)buf[1] == 0xff);
	close(fd);
	fd = client(px);
	say(fd, "\x05\x01\x00\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50", 13);
	ck_assert_uint_eq(hear(fd, buf, sizeof(buf), SIZE_MAX), 12);
	ck_assert_int_eq(buf[3], 7);
	close(fd);
	ck_assert_ptr_null(cae_net_proxy_take_denied(px));
	cae_net_proxy_free(px);
}
END_TEST

START_TEST(silent_clients_are_bounded)
{
	cae_net_proxy_options o;
	cae_net_proxy_options_init(&o);
	o.header_timeout_ms = 300;
	o.max_connections = 4;
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, &o);
	cae_net_proxy *other = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	int fds[4];
	for (int i = 0; i < 4; i++)
		fds[i] = client(px);
	/* the fifth is refused at once; another environment's proxy still serves */
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(cae_net_proxy_serve_fd(px, sv[1]), -EAGAIN);
	close(sv[0]);
	struct server *s = server_start(AF_INET);
	char req[128];
	snprintf(req, sizeof(req), "GET http://localhost:%d/other HTTP/1.1\r\n\r\n", s->port);
	ck_assert_msg(strstr(ask(other, req), "GET /other"), "the other environment is stalled");
	/* the silent ones are dropped (end of file, no answer) after the header deadline */
	for (int i = 0; i < 4; i++) {
		char b[16];
		ck_assert_uint_eq(hear(fds[i], b, sizeof(b), SIZE_MAX), 0);
		close(fds[i]);
	}
	while (cae_net_proxy_active(px) > 0)
		usleep(1000);
	/* a slot again */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(cae_net_proxy_serve_fd(px, sv[1]), 0);
	close(sv[0]);
	cae_net_proxy_free(other);
	cae_net_proxy_free(px);
}
END_TEST

/* In a sanitized build, freed memory waits in a quarantine (256 MiB by default) before it is
 * reused: a small one, so that resident memory measures what the proxy keeps. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=4";
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

START_TEST(ten_thousand_connections)
{
	cae_net_proxy_options o;
	cae_net_proxy_options_init(&o);
	o.max_connections = 16;
	cae_net_proxy *px = proxy_with(local_names, 1, NULL, 0, &o);
	long before = 0;
	for (int i = 0; i < 10000; i++) {
		if (i == 200)
			before = rss_kib();
		int sv[2];
		ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		int r;
		while ((r = cae_net_proxy_serve_fd(px, sv[1])) == -EAGAIN) {
			/* the bound: wait for a slot (the fd was closed: a new pair) */
			close(sv[0]);
			usleep(100);
			ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		}
		ck_assert_int_eq(r, 0);
		ck_assert_int_le(cae_net_proxy_active(px), 16);
		static const char req[] = "CONNECT denied.example:443 HTTP/1.1\r\n\r\n";
		say(sv[0], req, sizeof(req) - 1);
		char buf[512];
		hear(sv[0], buf, sizeof(buf), SIZE_MAX);
		ck_assert_msg(strstr(buf, "403"), "%d: %s", i, buf);
		close(sv[0]);
	}
	while (cae_net_proxy_active(px) > 0)
		usleep(1000);
	long after = rss_kib();
	ck_assert_msg(after - before < 16 * 1024, "memory grew by %ld KiB", after - before);
	json_t *d = cae_net_proxy_take_denied(px);
	ck_assert_uint_eq(json_array_size(d), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(d, 0), "count")), 10000);
	json_decref(d);
	cae_net_proxy_free(px);
}
END_TEST

/* ---- a bulk transfer through the relay ---- */

#define BULK_UP (4u << 20)
#define BULK_DOWN (24u << 20)

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i % 251 + i / 65521);
}

/* One connection: reads BULK_UP bytes of the pattern (counts the wrong ones), then writes
 * BULK_DOWN of it and closes. */
struct bulk_server {
	int fd;
	int port;
	size_t wrong_up;
	pthread_t t;
};

static void *bulk_main(void *arg)
{
	struct bulk_server *b = arg;
	int c = accept(b->fd, NULL, NULL);
	if (c < 0)
		return NULL;
	static unsigned char buf[1 << 16];
	size_t got = 0;
	while (got < BULK_UP) {
		ssize_t k = read(c, buf, MIN(sizeof(buf), BULK_UP - got));
		if (k <= 0)
			break;
		for (ssize_t i = 0; i < k; i++)
			b->wrong_up += buf[i] != pattern(got + (size_t)i);
		got += (size_t)k;
	}
	b->wrong_up += BULK_UP - got;
	for (size_t sent = 0; sent < BULK_DOWN;) {
		size_t n = MIN(sizeof(buf), BULK_DOWN - sent);
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(sent + i);
		if (cae__write_all(c, buf, n) < 0)
			break;
		sent += n;
	}
	close(c);
	return NULL;
}

static int listen_loopback(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(a);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sl), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* Megabytes each way over TCP arrive whole and in order through the spliced relay (whose
 * pipe grows for them), and what the proxy may keep queued for its client stays bounded:
 * its socket to the client has a fixed send buffer of at most 256 KiB, where the kernel's
 * autotuning would let a client that does not read pin up to tcp_wmem's maximum (4 MiB). */
START_TEST(bulk_relay_is_whole_and_bounded)
{
	struct bulk_server b = {0};
	b.fd = listen_loopback(&b.port);
	ck_assert_int_eq(pthread_create(&b.t, NULL, bulk_main, &b), 0);
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	/* the client over TCP, as through a handed-over listener; a second descriptor of the
	 * proxy's end to look at it */
	int lport, lfd = listen_loopback(&lport);
	int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in la = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)lport)};
	ck_assert_int_eq(connect(cfd, (struct sockaddr *)&la, sizeof(la)), 0);
	int pfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(pfd, 0);
	int look = dup(pfd);
	ck_assert_int_ge(look, 0);
	ck_assert_int_eq(cae_net_proxy_serve_fd(px, pfd), 0);
	char req[128], buf[1 << 16];
	int n = snprintf(req, sizeof(req), "CONNECT localhost:%d HTTP/1.1\r\n\r\n", b.port);
	say(cfd, req, (size_t)n);
	hear(cfd, buf, sizeof(buf), 39);
	ck_assert_str_eq(buf, "HTTP/1.1 200 Connection established\r\n\r\n");
	for (size_t sent = 0; sent < BULK_UP;) {
		size_t k = MIN(sizeof(buf), BULK_UP - sent);
		for (size_t i = 0; i < k; i++)
			buf[i] = (char)pattern(sent + i);
		say(cfd, buf, k);
		sent += k;
	}
	size_t got = 0, wrong = 0;
	for (;;) {
		ssize_t k = read(cfd, buf, sizeof(buf));
		if (k <= 0)
			break;
		for (ssize_t i = 0; i < k; i++)
			wrong += (unsigned char)buf[i] != pattern(got + (size_t)i);
		got += (size_t)k;
	}
	pthread_join(b.t, NULL);
	ck_assert_uint_eq(b.wrong_up, 0);
	ck_assert_uint_eq(got, BULK_DOWN);
	ck_assert_uint_eq(wrong, 0);
	int sndbuf = 0;
	socklen_t sl = sizeof(sndbuf);
	ck_assert_int_eq(getsockopt(look, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl), 0);
	ck_assert_msg(sndbuf <= 256 * 1024, "the proxy's send buffer to its client: %d bytes",
		      sndbuf);
	close(look);
	close(cfd);
	close(lfd);
	close(b.fd);
	while (cae_net_proxy_active(px) > 0)
		usleep(1000);
	cae_net_proxy_free(px);
}
END_TEST

START_TEST(listener_and_env)
{
	struct server *s = server_start(AF_INET);
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	/* a listening socket handed to the proxy */
	struct {
		int fd;
	} l = {socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(a);
	ck_assert_int_eq(bind(l.fd, (struct sockaddr *)&a, sl), 0);
	ck_assert_int_eq(listen(l.fd, 16), 0);
	ck_assert_int_eq(getsockname(l.fd, (struct sockaddr *)&a, &sl), 0);
	ck_assert_int_eq(cae_net_proxy_listen_fd(px, l.fd), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sl), 0);
	char req[128], buf[4096];
	snprintf(req, sizeof(req), "GET http://localhost:%d/l HTTP/1.1\r\n\r\n", s->port);
	say(fd, req, strlen(req));
	hear(fd, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "GET /l HTTP/1.1"), "%s", buf);
	close(fd);
	/* a client still connected when the proxy ends is cut, not waited for */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sl), 0);
	cae_net_proxy_free(px);
	close(fd);
	const char *const *env = cae_net_proxy_env();
	bool https = false, no = false;
	for (; *env; env++) {
		https |= strcmp(*env, "https_proxy=http://127.0.0.1:3128") == 0;
		no |= strncmp(*env, "NO_PROXY=", 9) == 0;
	}
	ck_assert(https && no);
}
END_TEST

/* ---- the handover of a container's listeners (net-handover.h) ---- */

/* A TCP socket on 127.0.0.1 (port 0: any), listening or (type SOCK_DGRAM) only bound. */
static int bound(int type, int port, int *got)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sl), 0);
	if (type == SOCK_STREAM)
		ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	if (got)
		*got = ntohs(a.sin_port);
	return fd;
}

/* What an attacker in the container would send to the manager's socket: data, n fds. */
static int send_to(const char *path, const char *data, const int *fds, size_t n)
{
	int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	struct iovec iov = {.iov_base = (void *)data, .iov_len = strlen(data)};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (n) {
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(n * sizeof(int));
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(h), fds, n * sizeof(int));
	}
	ck_assert_int_eq(sendmsg(c, &m, MSG_NOSIGNAL), (ssize_t)strlen(data));
	return c;
}

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

static bool dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	if (d)
		closedir(d);
	return d && n == 0;
}

/* The forged handovers an attacker in the container could make while the manager waits
 * (any uid of the container may reach the socket): a wrong token with listeners of its
 * own; the token (had it read it) with the proxy's listeners swapped, a UDP socket, a
 * connected socket, a pipe, three descriptors, none. Returns their connections. */
static void forge_handovers(const char *path, const char *token, int ph, int ps, int hfd, int sfd,
			    int conns[8])
{
	int a1, a2;
	int ah = bound(SOCK_STREAM, 0, &a1), as = bound(SOCK_STREAM, 0, &a2);
	int udp = bound(SOCK_DGRAM, ph, NULL);
	int cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* (connected to a listener of its own: one the proxy may serve would count) */
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a2)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(cl, (struct sockaddr *)&a, sizeof(a)), 0);
	int pp[2];
	ck_assert_int_eq(pipe2(pp, O_CLOEXEC), 0);
	char wrong[33];
	snprintf(wrong, sizeof(wrong), "%s", token);
	wrong[0] = wrong[0] == '0' ? '1' : '0';
	int k = 0;
	conns[k++] = send_to(path, wrong, (int[]){ah, as}, 2);
	conns[k++] = send_to(path, token, (int[]){sfd, hfd}, 2);
	conns[k++] = send_to(path, token, (int[]){udp, sfd}, 2);
	conns[k++] = send_to(path, token, (int[]){hfd, cl}, 2);
	conns[k++] = send_to(path, token, (int[]){pp[0], sfd}, 2);
	conns[k++] = send_to(path, token, (int[]){hfd, sfd, ah}, 3);
	conns[k++] = send_to(path, token, NULL, 0);
	conns[k++] = send_to(path, "", (int[]){hfd, sfd}, 2);
	int mine[] = {ah, as, udp, cl, pp[0], pp[1]};
	for (size_t i = 0; i < ARRAY_SIZE(mine); i++)
		close(mine[i]);
}

START_TEST(handover_refuses_forgeries)
{
	char dir[] = "/tmp/cae-test-handover-XXXXXX", path[PATH_MAX];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	int ph, ps;
	int hfd = bound(SOCK_STREAM, 0, &ph), sfd = bound(SOCK_STREAM, 0, &ps);
	cae__net_handover h;
	ck_assert_int_eq(cae__net_handover_open(dir, &h), 0);
	ck_assert_str_eq(h.path + strlen(h.path) - strlen(h.name), h.name);
	snprintf(path, sizeof(path), "%s/%s", dir, h.name);
	int conns[8];
	forge_handovers(path, h.token, ph, ps, hfd, sfd, conns);
	int before = open_fds() - 2; /* (h's socket and directory: take closes them) */
	/* none of them is taken, nothing they sent is kept, and the socket is gone */
	ck_assert_int_eq(cae__net_handover_take(&h, px, ph, ps), 0);
	ck_assert_int_eq(open_fds(), before);
	ck_assert(dir_empty(dir));
	for (int i = 0; i < 8; i++) {
		char b;
		ck_assert_int_eq(read(conns[i], &b, 1), 0); /* closed, not acknowledged */
		close(conns[i]);
	}
	/* ... and the proxy serves no listener: a connection waits for us to accept it */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ph)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	int got = accept4(hfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(got, 0);
	close(got);
	close(c);
	cae_net_proxy_free(px);
	close(hfd);
	close(sfd);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(handover_takes_the_helpers_listeners)
{
	char dir[] = "/tmp/cae-test-handover-XXXXXX", path[PATH_MAX];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	cae_net_proxy *px = proxy_with(local_names, 1, loopback_v4, 1, NULL);
	int ph, ps;
	int hfd = bound(SOCK_STREAM, 0, &ph), sfd = bound(SOCK_STREAM, 0, &ps);
	cae__net_handover h;
	ck_assert_int_eq(cae__net_handover_open(dir, &h), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, h.name);
	/* the forgeries come first (an attacker racing the helper), the helper's after */
	int conns[8];
	forge_handovers(path, h.token, ph, ps, hfd, sfd, conns);
	int hc = cae__helper_net_handover(path, h.token, hfd, sfd);
	ck_assert_int_ge(hc, 0);
	int before = open_fds() - 2; /* (h's socket and directory: take closes them) */
	ck_assert_int_eq(cae__net_handover_take(&h, px, ph, ps), 1);
	/* the two listeners, nothing else the forgeries sent */
	ck_assert_int_eq(open_fds(), before + 2);
	ck_assert(dir_empty(dir));
	struct pollfd p = {.fd = hc, .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	char b = 0;
	ck_assert_int_eq(read(hc, &b, 1), 1);
	ck_assert_int_eq(b, 'k');
	close(hc);
	for (int i = 0; i < 8; i++)
		close(conns[i]);
	/* the helper closes its copies: the proxy accepts, and its policy holds */
	close(hfd);
	close(sfd);
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ph)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	static const char req[] = "CONNECT denied.example:443 HTTP/1.1\r\n\r\n";
	say(c, req, sizeof(req) - 1);
	char buf[512];
	hear(c, buf, sizeof(buf), SIZE_MAX);
	ck_assert_msg(strstr(buf, "403") && strstr(buf, "denied.example"), "%s", buf);
	close(c);
	cae_net_proxy_free(px);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static bool name_gone(const char *name, void *ud)
{
	(void)ud;
	size_t n = strlen(name);
	return n > 5 && strcmp(name + n - 5, "-gone") == 0;
}

START_TEST(handover_directory)
{
	char st[] = "/tmp/cae-test-handover-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(st));
	/* a uuid that would leave the directory is none */
	ck_assert_ptr_null(cae__net_handover_dir(st, "../x"));
	ck_assert_ptr_null(cae__net_handover_dir(st, ".."));
	ck_assert_ptr_null(cae__net_handover_dir(st, ""));
	char *d = NULL;
	ck_assert_int_eq(cae__net_handover_dir_make(st, "u1", &d), 0);
	struct stat sb;
	ck_assert_int_eq(stat(d, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0711);
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s/net", st);
	ck_assert_int_eq(stat(parent, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0700);
	/* a symlink where an environment's directory should be is not followed */
	char other[PATH_MAX], link[PATH_MAX];
	snprintf(other, sizeof(other), "%s/elsewhere", st);
	snprintf(link, sizeof(link), "%s/net/u2", st);
	ck_assert_int_eq(mkdir(other, 0755), 0);
	ck_assert_int_eq(symlink(other, link), 0);
	char *d2 = NULL;
	ck_assert_int_lt(cae__net_handover_dir_make(st, "u2", &d2), 0);
	cae__net_handover h;
	ck_assert_int_lt(cae__net_handover_open(link, &h), 0);
	ck_assert(dir_empty(other));
	/* removal takes what a dead manager left */
	ck_assert_int_eq(cae__net_handover_open(d, &h), 0);
	cae__net_handover_dir_remove(st, "u1");
	ck_assert_int_ne(stat(d, &sb), 0);
	cae__net_handover_close(&h);
	free(d);
	/* the sweep: an old directory whose environment is gone goes, a live one and one made
	 * in the last minute (its container may be being made) stay */
	const char *names[] = {"old-gone", "old-live", "new-gone"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		ck_assert_int_eq(cae__net_handover_dir_make(st, names[i], &d), 0);
		if (strncmp(names[i], "old", 3) == 0) {
			struct timespec t[2] = {{time(NULL) - 120, 0}, {time(NULL) - 120, 0}};
			ck_assert_int_eq(utimensat(AT_FDCWD, d, t, 0), 0);
		}
		free(d);
	}
	ck_assert_int_eq(cae__net_handover_sweep(st, name_gone, NULL), 1);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/net/%s", st, names[i]);
		ck_assert_int_eq(stat(p, &sb) == 0, i != 0);
		if (i != 0)
			cae__net_handover_dir_remove(st, names[i]);
	}
	ck_assert_int_eq(unlink(link), 0);
	ck_assert_int_eq(rmdir(other), 0);
	ck_assert_int_eq(rmdir(parent), 0);
	ck_assert_int_eq(rmdir(st), 0);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("net");
	TCase *tc = tcase_create("policy");
	tcase_add_loop_test(tc, domain_entries_malformed, 0, (int)ARRAY_SIZE(bad_domains));
	tcase_add_test(tc, domain_entries_wellformed);
	tcase_add_test(tc, address_entries);
	tcase_add_test(tc, matching);
	tcase_add_test(tc, addresses);
	suite_add_tcase(s, tc);
	tc = tcase_create("proxy");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, http_connect_to_allowed_name);
	tcase_add_test(tc, http_forward_rewrites_the_head);
	tcase_add_test(tc, socks5_by_name_ipv4_ipv6);
	tcase_add_test(tc, refusals);
	tcase_add_test(tc, garbage_is_refused_cleanly);
	tcase_add_test(tc, silent_clients_are_bounded);
	tcase_add_test(tc, ten_thousand_connections);
	tcase_add_test(tc, bulk_relay_is_whole_and_bounded);
	tcase_add_test(tc, listener_and_env);
	suite_add_tcase(s, tc);
	tc = tcase_create("handover");
	tcase_add_test(tc, handover_refuses_forgeries);
	tcase_add_test(tc, handover_takes_the_helpers_listeners);
	tcase_add_test(tc, handover_directory);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
