#include "docker/curl-lazy.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

static cae_curl_api api;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Stand-ins when libcurl is missing: the first calls any user makes fail cleanly. */
static CURLcode no_global_init(long f)
{
	(void)f;
	return CURLE_FAILED_INIT;
}
static CURL *no_easy_init(void)
{
	return NULL;
}
static const char *no_strerror(CURLcode c)
{
	(void)c;
	return load_error;
}
static void no_free(void *p)
{
	(void)p;
}
static struct curl_slist *no_slist_append(struct curl_slist *l, const char *s)
{
	(void)s;
	return l;
}
static void no_slist_free_all(struct curl_slist *l)
{
	(void)l;
}

static void load(void)
{
	void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	if (h) {
		cae_curl_api a;
		int missing = 0;
#define SYM(field, name)                                                                           \
	do {                                                                                       \
		*(void **)(&a.field) = dlsym(h, name);                                             \
		if (!a.field)                                                                      \
			missing++;                                                                 \
	} while (0)
		SYM(global_init, "curl_global_init");
		SYM(easy_init, "curl_easy_init");
		SYM(easy_setopt, "curl_easy_setopt");
		SYM(easy_perform, "curl_easy_perform");
		SYM(easy_getinfo, "curl_easy_getinfo");
		SYM(easy_cleanup, "curl_easy_cleanup");
		SYM(easy_reset, "curl_easy_reset");
		SYM(easy_strerror, "curl_easy_strerror");
		SYM(easy_escape, "curl_easy_escape");
		SYM(easy_recv, "curl_easy_recv");
		SYM(easy_send, "curl_easy_send");
		SYM(free, "curl_free");
		SYM(slist_append, "curl_slist_append");
		SYM(slist_free_all, "curl_slist_free_all");
#undef SYM
		if (!missing) {
			api = a;
			return;
		}
		snprintf(load_error, sizeof(load_error), "libcurl.so.4 lacks %d symbol(s)",
			 missing);
	} else {
		const char *e = dlerror();
		snprintf(load_error, sizeof(load_error), "cannot load libcurl: %s",
			 e ? e : "unknown error");
	}
	memset(&api, 0, sizeof(api));
	api.global_init = no_global_init;
	api.easy_init = no_easy_init;
	api.easy_strerror = no_strerror;
	api.free = no_free;
	api.slist_append = no_slist_append;
	api.slist_free_all = no_slist_free_all;
}

const cae_curl_api *cae__curl(void)
{
	pthread_once(&once, load);
	return &api;
}

const char *cae__curl_error(void)
{
	pthread_once(&once, load);
	return load_error[0] ? load_error : NULL;
}
