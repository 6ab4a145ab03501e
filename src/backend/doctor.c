/* cae doctor (cae/doctor.h): the report over every backend's checks, and what the backends'
 * check files share (the state directory, how to get an image). */
#include "backend/doctor.h"

#include "backend/backend-internal.h"
#include "base/fs.h"
#include "cae/doctor.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

void cae__doctor_add(json_t *checks, const char *name, bool ok, bool required, const char *fix,
		     const char *detail_fmt, ...)
{
	char detail[1024];
	va_list ap;
	va_start(ap, detail_fmt);
	vsnprintf(detail, sizeof(detail), detail_fmt, ap);
	va_end(ap);
	json_array_append_new(checks, json_pack("{s:s, s:b, s:s, s:s?, s:b}", "name", name, "ok",
						ok, "detail", detail, "fix", ok ? NULL : fix,
						"required", required));
}

void cae__doctor_state_dir(const cae_config *cfg, json_t *checks, bool required)
{
	const char *dir = cfg->command_executor.state_dir;
	static const char fix_fmt[] = "make it writable by this user, or set "
				      "command_executor.state_dir (CAE_STATE_DIR) to a directory "
				      "that is";
	if (!dir) {
		cae__doctor_add(checks, "state directory", false, required, fix_fmt, "not set");
		return;
	}
	struct stat st;
	if (stat(dir, &st) == 0) {
		bool ok = S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0;
		cae__doctor_add(checks, "state directory", ok, required, fix_fmt, "%s%s", dir,
				!S_ISDIR(st.st_mode) ? " is not a directory"
				: ok		     ? " (writable)"
						     : " is not writable");
		return;
	}
	/* not there yet: made on first use where the nearest existing parent is writable */
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", dir);
	for (;;) {
		char *slash = strrchr(parent, '/');
		if (!slash)
			break;
		if (slash == parent)
			slash[1] = '\0';
		else
			*slash = '\0';
		if (stat(parent, &st) == 0 || slash == parent)
			break;
	}
	bool ok = access(parent, W_OK | X_OK) == 0;
	cae__doctor_add(checks, "state directory", ok, required, fix_fmt,
			"%s does not exist yet (%s: made on first use under %s)", dir,
			ok ? "fine" : "cannot be", parent);
}

const char *cae__doctor_image_fix(const char *name, const char *image, char *buf, size_t size)
{
	char own[256];
	snprintf(own, sizeof(own), "coding-agent-executor-%s:latest", name);
	if (strcmp(own, image) == 0)
		snprintf(buf, size, "cae images build %s", name);
	else
		snprintf(buf, size,
			 "docker pull %s (or build it), or map the environment %s to an "
			 "image this engine has (command_executor.environments)",
			 image, name);
	return buf;
}

/* A backend's entry: its checks and whether every required one passed. */
static json_t *backend_entry(json_t *checks)
{
	bool ok = true;
	size_t i;
	json_t *c;
	json_array_foreach(checks, i, c)
	{
		if (json_is_true(json_object_get(c, "required")) &&
		    !json_is_true(json_object_get(c, "ok")))
			ok = false;
	}
	return json_pack("{s:b, s:o}", "ok", ok, "checks", checks);
}

json_t *cae_doctor_run(const cae_config *cfg, const char *backend)
{
	const char *configured =
	    backend ? backend : cae_config_backend_name(cfg->command_executor.backend);
	json_t *local = json_array(), *docker = json_array(), *k8s = json_array();
	if (!local || !docker || !k8s) {
		json_decref(local);
		json_decref(docker);
		json_decref(k8s);
		return NULL;
	}
	bool engine = false;
	cae__doctor_local(cfg, local);
	cae__doctor_docker(cfg, docker, &engine);
	cae__doctor_kubernetes(cfg, k8s);
	const char *def = configured;
	if (strcmp(def, "auto") == 0)
		def = cae__kubernetes_backend_configured(cfg) ? "kubernetes"
		      : engine				      ? "docker"
							      : "local";
	json_t *backends = json_pack("{s:o, s:o, s:o}", "local", backend_entry(local), "docker",
				     backend_entry(docker), "kubernetes", backend_entry(k8s));
	if (!backends)
		return NULL;
	json_t *entry = json_object_get(backends, def);
	bool ok = entry && json_is_true(json_object_get(entry, "ok"));
	return json_pack("{s:s, s:s, s:b, s:o}", "default_backend", def, "configured_backend",
			 configured, "ok", ok, "backends", backends);
}
