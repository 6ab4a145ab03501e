/* libwebsockets loaded on first use: see lws-lazy.h. */
#include "k8s/lws-lazy.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

#ifndef CAE_LWS_SONAME
#define CAE_LWS_SONAME "libwebsockets.so"
#endif

static cae_lws_api api;
static bool loaded;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
	void *h = dlopen(CAE_LWS_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(load_error, sizeof(load_error), "cannot load %s: %s", CAE_LWS_SONAME,
			 e ? e : "unknown error");
		return;
	}
	cae_lws_api a;
	const char *missing = NULL;
#define SYM(field, name)                                                                           \
	do {                                                                                       \
		*(void **)(&a.field) = dlsym(h, name);                                             \
		if (!a.field && !missing)                                                          \
			missing = name;                                                            \
	} while (0)
	SYM(create_context, "lws_create_context");
	SYM(context_destroy, "lws_context_destroy");
	SYM(create_vhost, "lws_create_vhost");
	SYM(client_connect_via_info, "lws_client_connect_via_info");
	SYM(service, "lws_service");
	SYM(cancel_service, "lws_cancel_service");
	SYM(callback_on_writable, "lws_callback_on_writable");
	SYM(write, "lws_write");
	SYM(get_opaque_user_data, "lws_get_opaque_user_data");
	SYM(set_opaque_user_data, "lws_set_opaque_user_data");
	SYM(set_timeout, "lws_set_timeout");
	SYM(set_log_level, "lws_set_log_level");
	SYM(is_first_fragment, "lws_is_first_fragment");
	SYM(is_final_fragment, "lws_is_final_fragment");
	SYM(hdr_copy, "lws_hdr_copy");
	SYM(add_http_header_by_token, "lws_add_http_header_by_token");
	SYM(http_client_http_response, "lws_http_client_http_response");
	SYM(b64_decode_string_len, "lws_b64_decode_string_len");
#undef SYM
	if (missing) {
		snprintf(load_error, sizeof(load_error), "%s has no %s", CAE_LWS_SONAME, missing);
		dlclose(h);
		return;
	}
	/* its log goes to stderr by default: only our errors are reported, in our words */
	a.set_log_level(0, NULL);
	api = a;
	loaded = true;
}

const cae_lws_api *cae__lws(void)
{
	pthread_once(&once, load);
	return loaded ? &api : NULL;
}

const char *cae__lws_error(void)
{
	pthread_once(&once, load);
	return loaded ? NULL : load_error;
}
