/* The one GitLab API call cae needs: a project's path_with_namespace, for the clone URL. */
#include "backend/backend-internal.h"

#include "base/buf.h"
#include "base/macro.h"

#include "docker/curl-lazy.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define GITLAB_TIMEOUT_S 30L
#define GITLAB_MAX_BODY (1u << 20)

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	cae_buf *b = ud;
	if (cae__buf_append(b, p, size * n) < 0 || b->truncated)
		return 0; /* too large or no memory: abort the transfer */
	return size * n;
}

int cae__gitlab_project_path(const cae_config *cfg, const char *owner, const char *name,
			     char **path, cae_error *err)
{
	*path = NULL;
	const char *api = cfg->gitlab.api_url ? cfg->gitlab.api_url : "https://gitlab.com/api/v4";
	CURL *c = curl_easy_init();
	if (!c)
		return cae_error_set(err, -ENOMEM, "gitlab api: cannot initialise libcurl");
	size_t idl = strlen(owner) + strlen(name) + 2;
	_cleanup_free_ char *id = malloc(idl);
	if (!id) {
		curl_easy_cleanup(c);
		return -ENOMEM;
	}
	snprintf(id, idl, "%s/%s", owner, name);
	char *esc = curl_easy_escape(c, id, 0);
	size_t ul = strlen(api) + (esc ? strlen(esc) : 0) + 16;
	_cleanup_free_ char *url = malloc(ul);
	if (!esc || !url) {
		curl_free(esc);
		curl_easy_cleanup(c);
		return -ENOMEM;
	}
	snprintf(url, ul, "%s%s/projects/%s", api, api[strlen(api) - 1] == '/' ? "" : "", esc);
	curl_free(esc);
	struct curl_slist *hdrs = NULL;
	char tok[4200];
	if (cfg->gitlab.token) {
		snprintf(tok, sizeof(tok), "PRIVATE-TOKEN: %s", cfg->gitlab.token);
		hdrs = curl_slist_append(hdrs, tok);
	}
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	cae_buf body;
	cae__buf_init(&body, GITLAB_MAX_BODY);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, GITLAB_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	if (!cfg->gitlab.ssl_verify) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	memset(tok, 0, sizeof(tok));
	int r = 0;
	if (rc != CURLE_OK) {
		r = cae_error_set(err, -EIO, "gitlab api: %s: %s", url, curl_easy_strerror(rc));
	} else if (status != 200) {
		r = cae_error_set(err, status == 404 ? -ENOENT : -EIO,
				  "gitlab api: %s answered HTTP %ld%s", url, status,
				  status == 401 || status == 403 ? " (check the token)" : "");
	} else {
		json_error_t je;
		json_t *j = json_loadb(body.data ? body.data : "", body.len, 0, &je);
		const char *p = json_string_value(json_object_get(j, "path_with_namespace"));
		if (!p || !*p || strstr(p, ".."))
			r = cae_error_set(err, -EIO, "gitlab api: no path_with_namespace for %s",
					  id);
		else if (!(*path = strdup(p)))
			r = -ENOMEM;
		json_decref(j);
	}
	cae__buf_clear(&body);
	return r;
}
