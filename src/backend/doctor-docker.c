/* cae doctor, the docker backend's checks: the state directory, the engine (reachable at
 * command_executor.docker_host, its version, its storage driver and so the disk bound),
 * cae-helper-static, and the image of every configured environment. */
#include "backend/doctor.h"

#include "backend/backend-internal.h"
#include "backend/diskfs.h"
#include "cae/docker.h"
#include "cae/helper.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define DOCTOR_DOCKER_TIMEOUT_MS 5000

/* The storage driver and whether it (or a loop file system) bounds a container's disk, as
 * the backend decides at prepare (backend-docker.c). */
static void check_storage(const cae_config *cfg, cae_docker *d, json_t *checks)
{
	json_t *info = NULL;
	cae_error err = {0};
	if (cae_docker_info(d, &info, &err) < 0) {
		cae__doctor_add(checks, "storage driver", false, false, "see the engine above",
				"GET /info failed: %s", err.message);
		return;
	}
	const char *backing;
	const char *driver = cae__docker_driver(info, &backing);
	bool sized = cae__docker_driver_sized(driver, backing);
	if (!*driver)
		driver = "(unknown)";
	bool local = strncmp(cae_docker_host(d), "unix://", 7) == 0;
	bool loopfs = local && cae__diskfs_usable(NULL) == 0;
	bool off = cfg->command_executor.docker.resources.disk_bytes == 0;
	cae__doctor_add(checks, "storage driver", off || sized || loopfs, false,
			"overlay2 on xfs mounted with pquota (or btrfs, zfs), or run cae as root "
			"on the engine's host with the loop driver and mkfs.ext4, so that "
			"disk_limit bounds a workspace",
			"%s%s%s: %s", driver, *backing ? " on " : "", backing,
			off	? "disk_limit is 0 (no bound wanted)"
			: sized ? "takes a size option: disk_limit bounds a container"
			: loopfs
			    ? "takes no size option; a workspace gets a loop file system of "
			      "disk_limit on this host instead"
			    : "takes no size option, and no loop file system can be made here: "
			      "disk_limit is not applied");
	json_decref(info);
}

static void check_images(const cae_config *cfg, cae_docker *d, json_t *checks)
{
	for (size_t i = 0; i < cfg->command_executor.n_environments; i++) {
		const cae_config_environment *e = &cfg->command_executor.environments[i];
		bool deflt = strcmp(e->name, cfg->command_executor.default_environment) == 0;
		char name[128], fix[512], path[1024];
		snprintf(name, sizeof(name), "image %s", e->name);
		json_t *img = NULL;
		cae_error err = {0};
		int r;
		/* a reference's own characters only: it goes into the path as it is */
		if (e->image[strspn(e->image, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					      "0123456789._-/:@")] != '\0') {
			r = cae_error_set(&err, -EINVAL, "not an image reference");
		} else {
			snprintf(path, sizeof(path), "/images/%s/json", e->image);
			r = cae_docker_call(d, "GET", path, NULL, &img, &err);
		}
		const char *id = json_string_value(json_object_get(img, "Id"));
		cae__doctor_add(checks, name, r >= 0, deflt,
				cae__doctor_image_fix(e->name, e->image, fix, sizeof(fix)),
				"%s%s%.19s%s", e->image,
				r >= 0	       ? " is present ("
				: r == -ENOENT ? " is missing"
					       : " cannot be inspected: ",
				r >= 0	       ? (id ? id : "?")
				: r == -ENOENT ? ""
					       : err.message,
				r >= 0 ? ")" : "");
		json_decref(img);
	}
}

void cae__doctor_docker(const cae_config *cfg, json_t *checks, bool *reachable)
{
	*reachable = false;
	cae__doctor_state_dir(cfg, checks, true);
	const char *host = cfg->command_executor.docker_host;
	cae_docker *d = NULL;
	cae_error err = {0};
	static const char fix[] = "start the Docker engine (systemctl start docker, or dockerd), "
				  "or point command_executor.docker_host (DOCKER_HOST) at one";
	int r = cae_docker_new(host, &d, &err);
	if (r == 0) {
		cae_docker_set_timeout(d, DOCTOR_DOCKER_TIMEOUT_MS);
		r = cae_docker_ping(d, DOCTOR_DOCKER_TIMEOUT_MS, &err);
	}
	cae__doctor_add(checks, "engine", r == 0, true, fix, "%s %s%s", host ? host : "(default)",
			r == 0 ? "answers" : "does not answer: ", r == 0 ? "" : err.message);
	if (r < 0) {
		cae_docker_free(d);
		return;
	}
	*reachable = true;
	json_t *ver = NULL;
	r = cae_docker_call(d, "GET", "/version", NULL, &ver, &err);
	const char *api = cae_docker_api_version(d, NULL);
	cae__doctor_add(checks, "engine version", r >= 0, true,
			"a Docker engine with API " CAE_DOCKER_API_MIN " or later",
			"Docker %s (API %s; cae speaks " CAE_DOCKER_API_MIN
			" to " CAE_DOCKER_API_MAX ", uses %s)",
			json_string_value(json_object_get(ver, "Version"))
			    ? json_string_value(json_object_get(ver, "Version"))
			    : "?",
			json_string_value(json_object_get(ver, "ApiVersion"))
			    ? json_string_value(json_object_get(ver, "ApiVersion"))
			    : "?",
			api ? api : "?");
	json_decref(ver);
	check_storage(cfg, d, checks);
	_cleanup_free_ char *helper = NULL;
	bool have = cae_helper_find_static(&helper) == 0;
	cae__doctor_add(checks, "cae-helper-static", have, false,
			"install cae-helper-static next to cae (the build makes it when static "
			"libraries are there), or set CAE_HELPER_STATIC; without it commands are "
			"plain execs: no text editor, no process sessions, no live output",
			"%s", have ? helper : "not found");
	check_images(cfg, d, checks);
	cae_docker_free(d);
}
