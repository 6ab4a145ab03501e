/* libcurl, loaded on first use (internal to libcae).
 *
 * Linking libcurl costs every cae process ~10 ms at start-up (its dependency tree: TLS
 * libraries, LDAP, Kerberos, SSH, ... and their constructors), which is most of `cae mcp`'s
 * cold start, while only the docker backend and the GitLab API lookup need HTTP. So cae does
 * not link libcurl: files that need it include this header instead of <curl/curl.h>, and the
 * curl_* calls they write go through a table filled by dlopen("libcurl.so.4") the first time
 * one is made. When libcurl cannot be loaded, curl_easy_init() returns NULL and
 * curl_global_init() CURLE_FAILED_INIT, which callers already handle; cae__curl_error() says
 * why. The type-checking macros of curl.h are off in these files. */
#ifndef CAE_DOCKER_CURL_LAZY_H
#define CAE_DOCKER_CURL_LAZY_H

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

typedef struct cae_curl_api {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *c, CURLoption opt, ...);
	CURLcode (*easy_perform)(CURL *c);
	CURLcode (*easy_getinfo)(CURL *c, CURLINFO info, ...);
	void (*easy_cleanup)(CURL *c);
	void (*easy_reset)(CURL *c);
	const char *(*easy_strerror)(CURLcode code);
	char *(*easy_escape)(CURL *c, const char *s, int len);
	CURLcode (*easy_recv)(CURL *c, void *buf, size_t len, size_t *n);
	CURLcode (*easy_send)(CURL *c, const void *buf, size_t len, size_t *n);
	void (*free)(void *p);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
} cae_curl_api;

/* The table (loads libcurl on the first call; thread-safe). Never NULL: when loading failed,
 * the entries are stand-ins that fail. */
const cae_curl_api *cae__curl(void);
/* Why libcurl could not be loaded, or NULL when it was. */
const char *cae__curl_error(void);

#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init(f) (cae__curl()->global_init(f))
#define curl_easy_init() (cae__curl()->easy_init())
#define curl_easy_setopt(c, o, ...) (cae__curl()->easy_setopt((c), (o), __VA_ARGS__))
#define curl_easy_perform(c) (cae__curl()->easy_perform(c))
#define curl_easy_getinfo(c, i, ...) (cae__curl()->easy_getinfo((c), (i), __VA_ARGS__))
#define curl_easy_cleanup(c) (cae__curl()->easy_cleanup(c))
#define curl_easy_reset(c) (cae__curl()->easy_reset(c))
#define curl_easy_strerror(e) (cae__curl()->easy_strerror(e))
#define curl_easy_escape(c, s, l) (cae__curl()->easy_escape((c), (s), (l)))
#define curl_easy_recv(c, b, l, n) (cae__curl()->easy_recv((c), (b), (l), (n)))
#define curl_easy_send(c, b, l, n) (cae__curl()->easy_send((c), (b), (l), (n)))
#define curl_free(p) (cae__curl()->free(p))
#define curl_slist_append(l, s) (cae__curl()->slist_append((l), (s)))
#define curl_slist_free_all(l) (cae__curl()->slist_free_all(l))

#endif
