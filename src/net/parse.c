/* The proxy's request parsing (see cae_net_parse_request in cae/net.h): an HTTP proxy
 * request head (CONNECT, absolute form, origin form with Host), or SOCKS5's greeting and
 * CONNECT request. Pure functions of the bytes: the fuzz target drives them directly. */
#include "cae/net.h"

#include "base/buf.h"
#include "base/macro.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/banned.h"

#define MAX_HEAD 65536

/* host[:port] or [v6][:port] into req (lower case); def: the port when none is given (0: a
 * port is required). Returns false for anything else (a user part, an empty host...). */
static bool parse_authority(const char *s, size_t n, int def, cae_net_request *req)
{
	const char *host = s, *port = NULL;
	size_t hl;
	if (n > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close)
			return false;
		host = s + 1;
		hl = (size_t)(close - host);
		size_t rest = n - (size_t)(close + 1 - s);
		if (rest > 0) {
			if (close[1] != ':')
				return false;
			port = close + 2;
		}
		char tmp[64];
		unsigned char a[16];
		if (hl == 0 || hl >= sizeof(tmp))
			return false;
		memcpy(tmp, host, hl);
		tmp[hl] = '\0';
		if (inet_pton(AF_INET6, tmp, a) != 1)
			return false;
	} else {
		const char *colon = memchr(s, ':', n);
		hl = colon ? (size_t)(colon - s) : n;
		if (colon)
			port = colon + 1;
	}
	if (hl == 0 || hl > CAE_NET_MAX_NAME)
		return false;
	for (size_t i = 0; i < hl; i++) {
		unsigned char c = (unsigned char)host[i];
		if (!isalnum(c) && c != '.' && c != '-' && c != '_' && c != ':')
			return false;
		req->host[i] = (char)tolower(c);
	}
	req->host[hl] = '\0';
	if (port) {
		size_t pl = n - (size_t)(port - s);
		if (pl == 0 || pl > 5)
			return false;
		int v = 0;
		for (size_t i = 0; i < pl; i++) {
			if (!isdigit((unsigned char)port[i]))
				return false;
			v = v * 10 + (port[i] - '0');
		}
		if (v < 1 || v > 65535)
			return false;
		req->port = v;
	} else {
		if (!def)
			return false;
		req->port = def;
	}
	return true;
}

static bool is_token(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalpha((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
			return false;
	return true;
}

/* Header names dropped on the way: the proxy's own and the hop-by-hop ones we replace. */
static bool header_dropped(const char *name, size_t n)
{
	static const char *const drop[] = {"proxy-connection", "proxy-authorization", "connection",
					   "keep-alive", "host"};
	for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
		if (strlen(drop[i]) == n && strncasecmp(name, drop[i], n) == 0)
			return true;
	return false;
}

static void parse_http(const char *data, size_t len, cae_net_request *req)
{
	/* the head ends at an empty line (CRLF or LF) */
	size_t end = 0;
	for (size_t i = 0; i + 1 < len; i++) {
		if (data[i] == '\n' && data[i + 1] == '\n') {
			end = i + 2;
			break;
		}
		if (data[i] == '\n' && i + 2 < len && data[i + 1] == '\r' && data[i + 2] == '\n') {
			end = i + 3;
			break;
		}
	}
	if (!end) {
		/* nothing but a request line's characters may come before the head is whole */
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)data[i] < 0x20 && data[i] != '\r' && data[i] != '\n' &&
			    data[i] != '\t')
				goto bad;
		req->kind = len >= MAX_HEAD ? CAE_NET_REQ_BAD : CAE_NET_REQ_INCOMPLETE;
		return;
	}
	req->consumed = end;
	/* request line: METHOD SP target SP HTTP/1.x */
	const char *eol = memchr(data, '\n', end);
	size_t ll = (size_t)(eol - data);
	if (ll > 0 && data[ll - 1] == '\r')
		ll--;
	const char *sp1 = memchr(data, ' ', ll);
	if (!sp1 || !is_token(data, (size_t)(sp1 - data)))
		goto bad;
	const char *target = sp1 + 1;
	const char *sp2 = memchr(target, ' ', ll - (size_t)(target - data));
	if (!sp2 || sp2 == target)
		goto bad;
	size_t tl = (size_t)(sp2 - target);
	const char *version = sp2 + 1;
	size_t vl = ll - (size_t)(version - data);
	if (vl != 8 || strncmp(version, "HTTP/1.", 7) != 0 ||
	    (version[7] != '0' && version[7] != '1'))
		goto bad;
	size_t ml = (size_t)(sp1 - data);
	if (ml == 7 && strncmp(data, "CONNECT", 7) == 0) {
		if (!parse_authority(target, tl, 0, req))
			goto bad;
		req->kind = CAE_NET_REQ_CONNECT;
		return;
	}
	/* plain HTTP: absolute form (http://authority/path) or origin form with Host */
	const char *path = "/";
	size_t pl = 1;
	bool absolute = tl > 7 && strncasecmp(target, "http://", 7) == 0;
	if (absolute) {
		const char *auth = target + 7;
		size_t al = strcspn(auth, "/?# ");
		if (al > tl - 7)
			al = tl - 7;
		if (!parse_authority(auth, al, 80, req))
			goto bad;
		if (al < tl - 7) {
			path = auth + al;
			pl = tl - 7 - al;
			if (path[0] != '/') {
				/* "?q" after the authority: the path is "/" then the query */
				if (path[0] != '?')
					goto bad;
			}
		}
	} else if (target[0] == '/') {
		path = target;
		pl = tl;
	} else {
		goto bad;
	}
	for (size_t i = 0; i < pl; i++)
		if ((unsigned char)path[i] <= 0x20 || path[i] == 0x7f)
			goto bad;
	/* headers */
	cae_buf out;
	cae__buf_init(&out, MAX_HEAD * 2);
	bool have_host = absolute;
	char authority[CAE_NET_MAX_NAME + 16];
	int r = cae__buf_append(&out, data, ml + 1);
	if (path[0] == '?')
		r = r < 0 ? r : cae__buf_append(&out, "/", 1);
	r = r < 0 ? r : cae__buf_append(&out, path, pl);
	r = r < 0 ? r : cae__buf_append(&out, " ", 1);
	r = r < 0 ? r : cae__buf_append(&out, version, vl);
	r = r < 0 ? r : cae__buf_append(&out, "\r\n", 2);
	for (const char *line = eol + 1; r == 0 && line < data + end;) {
		const char *nl = memchr(line, '\n', (size_t)(data + end - line));
		size_t n = (size_t)(nl - line);
		const char *next = nl + 1;
		if (n > 0 && line[n - 1] == '\r')
			n--;
		if (n == 0)
			break;
		const char *colon = memchr(line, ':', n);
		if (!colon || colon == line)
			goto bad_buf;
		size_t nl_name = (size_t)(colon - line);
		for (size_t i = 0; i < nl_name; i++)
			if ((unsigned char)line[i] <= 0x20 || line[i] == 0x7f || line[i] == ':')
				goto bad_buf;
		for (size_t i = nl_name; i < n; i++)
			if (((unsigned char)line[i] < 0x20 && line[i] != '\t') || line[i] == 0x7f)
				goto bad_buf;
		if (!absolute && nl_name == 4 && strncasecmp(line, "host", 4) == 0) {
			if (have_host)
				goto bad_buf; /* two Host headers: which one is asked for? */
			const char *v = colon + 1;
			size_t vlen = n - nl_name - 1;
			while (vlen && (*v == ' ' || *v == '\t'))
				v++, vlen--;
			while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
				vlen--;
			if (!parse_authority(v, vlen, 80, req))
				goto bad_buf;
			have_host = true;
		}
		if (!header_dropped(line, nl_name)) {
			r = cae__buf_append(&out, line, n);
			r = r < 0 ? r : cae__buf_append(&out, "\r\n", 2);
		}
		line = next;
	}
	if (!have_host)
		goto bad_buf;
	bool v6 = strchr(req->host, ':') != NULL;
	if (req->port == 80)
		snprintf(authority, sizeof(authority), v6 ? "[%s]" : "%s", req->host);
	else
		snprintf(authority, sizeof(authority), v6 ? "[%s]:%d" : "%s:%d", req->host,
			 req->port);
	r = r < 0 ? r : cae__buf_append(&out, "Host: ", 6);
	r = r < 0 ? r : cae__buf_append(&out, authority, strlen(authority));
	r = r < 0 ? r : cae__buf_append(&out, "\r\nConnection: close\r\n\r\n", 23);
	if (r < 0)
		goto bad_buf;
	req->head = out.data;
	req->head_len = out.len;
	req->kind = CAE_NET_REQ_FORWARD;
	return;
bad_buf:
	cae__buf_clear(&out);
bad:
	req->kind = CAE_NET_REQ_BAD;
	req->host[0] = '\0';
	req->port = 0;
}

static void parse_socks_greeting(const unsigned char *d, size_t len, cae_net_request *req)
{
	if (len < 2) {
		req->kind = CAE_NET_REQ_INCOMPLETE;
		return;
	}
	size_t n = d[1];
	if (n == 0) {
		req->kind = CAE_NET_REQ_BAD;
		return;
	}
	if (len < 2 + n) {
		req->kind = CAE_NET_REQ_INCOMPLETE;
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (d[2 + i] == 0)
			req->socks_no_auth = true;
	req->consumed = 2 + n;
	req->kind = CAE_NET_REQ_SOCKS_GREETING;
}

static void parse_socks_request(const unsigned char *d, size_t len, cae_net_request *req)
{
	req->kind = CAE_NET_REQ_INCOMPLETE;
	if (len < 5)
		return;
	if (d[0] != 5 || d[2] != 0) {
		req->kind = CAE_NET_REQ_BAD;
		return;
	}
	size_t need;
	switch (d[3]) {
	case 1:
		need = 4 + 4 + 2;
		break;
	case 3:
		need = 4 + 1 + (size_t)d[4] + 2;
		if (d[4] == 0) {
			req->kind = CAE_NET_REQ_BAD;
			return;
		}
		break;
	case 4:
		need = 4 + 16 + 2;
		break;
	default:
		req->kind = CAE_NET_REQ_BAD;
		return;
	}
	if (len < need)
		return;
	req->consumed = need;
	if (d[1] != 1) {
		req->kind = CAE_NET_REQ_SOCKS_BADCMD;
		return;
	}
	if (d[3] == 1) {
		inet_ntop(AF_INET, d + 4, req->host, sizeof(req->host));
		req->socks_literal = true;
	} else if (d[3] == 4) {
		inet_ntop(AF_INET6, d + 4, req->host, sizeof(req->host));
		req->socks_literal = true;
	} else {
		size_t n = d[4];
		for (size_t i = 0; i < n; i++) {
			unsigned char c = d[5 + i];
			if (!isalnum(c) && c != '.' && c != '-' && c != '_' && c != ':') {
				req->kind = CAE_NET_REQ_BAD;
				req->host[0] = '\0';
				return;
			}
			req->host[i] = (char)tolower(c);
		}
		req->host[n] = '\0';
	}
	req->port = (d[need - 2] << 8) | d[need - 1];
	req->kind = CAE_NET_REQ_SOCKS_CONNECT;
}

void cae_net_parse_request(const char *data, size_t len, bool socks, cae_net_request *req)
{
	memset(req, 0, sizeof(*req));
	if (socks) {
		parse_socks_request((const unsigned char *)data, len, req);
		return;
	}
	if (len == 0) {
		req->kind = CAE_NET_REQ_INCOMPLETE;
		return;
	}
	if (data[0] == 5) {
		parse_socks_greeting((const unsigned char *)data, len, req);
		return;
	}
	parse_http(data, len, req);
}
