/* The docker backend: one container per task through the Engine API
 * (include/cae/docker.h), named coding-agent-exec-{task_uuid} and labelled with the task
 * uuid, the environment name and the creation time. Docker is the source of truth: info,
 * list and cleanup work from any process, from names and labels alone.
 *
 * A container is created as coding-agent-exec-{task_uuid}.creating (or claimed from the warm
 * pool, src/backend/pool.c, and renamed so), labelled with the preparing process (boot id, pid
 * namespace, pid, start time), and renamed to its final name as prepare's last step: a prepare that
 * did not finish (killed, crashed) leaves a container that is visibly not ready — "creating" while
 * its preparer lives, "failed" after — which exec refuses and gc removes whatever its age.
 *
 * Inside an environment: /workspace/project (the clone), /workspace/tmp (scratch), owned by
 * the image's non-root user (uid 1000). Containers run as 1000:1000 with every
 * capability dropped, no-new-privileges, CPU, memory (no swap beyond it) and pids limits, a
 * disk limit where the storage driver takes one, Docker's init as PID 1 (it reaps zombies),
 * and no host mount unless the Docker socket is configured (with a warning). */
#include "backend/backend-internal.h"
#include "backend/images.h"
#include "backend/diskfs.h"
#include "backend/pkgcache.h"
#include "cae/net.h"
#include "backend/chan.h"
#include "backend/envs.h"
#include "backend/net-handover.h"
#include "backend/net-local.h"
#include "backend/snapshot.h"

#include "base/chase.h"
#include "base/fs.h"
#include "base/gitsafe.h"
#include "base/macro.h"
#include "base/scratch.h"
#include "base/timeutil.h"
#include "cae/docker.h"
#include "cae/helper.h"
#include "cae/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define NAME_PREFIX CAE_DOCKER_NAME_PREFIX
#define LABEL_UUID "cae.task_uuid"
#define LABEL_ENV "cae.environment"
#define LABEL_CREATED CAE_DOCKER_LABEL_CREATED
#define LABEL_WARNINGS "cae.warnings"
#define LABEL_PREPARER "cae.preparer" /* boot_id/pidns/pid/starttime of the preparing process */
#define CREATING_SUFFIX ".creating"
#define WORKSPACE "/workspace"
#define PROJECT "/workspace/project"
#define SCRATCH "/workspace/tmp"
#define CONTAINER_USER "1000:1000"
#define CONTAINER_UID 1000
#define STOP_TIMEOUT_S 10
#define REMOVE_ATTEMPTS 3
#define AVAILABLE_TIMEOUT_MS 1000
#define CONNECT_TIMEOUT_MS 10000

/* The in-container helper: uploaded at create (the archive API works with any engine),
 * root's and read-only to commands, PID 1 of the container (`--init`: reaps, kills orphans,
 * stops the container after command_executor.docker.helper_lifetime_seconds without a
 * manager), and reached through one
 * attached exec per manager process (`--stream`). Without a static helper on this host the
 * container gets Docker's init and `sleep infinity`, and commands run as plain execs. */
#define HELPER_DIR "/.cae"
#define HELPER_PATH HELPER_DIR "/cae-helper"
#define LABEL_HELPER "cae.helper"
/* "host user forge": where a push may authenticate, and as whom; the token itself is never
 * in the container: the helper asks for it when git does (docker_credential) */
#define LABEL_GIT_CREDENTIAL "cae.git_credential"
#define LABEL_FORGE "cae.forge" /* the forge rule's "host:port" (net-local.h) */
/* a warm pool container's handover directory's name (net-handover.h; others': the uuid) */
#define LABEL_NET_DIR "cae.net_dir"
#define HELPER_OPEN_TIMEOUT_MS 10000
static const char *const pid1_argv[] = {"sleep", "infinity", NULL};

struct docker_impl {
	cae_docker *d;
	pthread_mutex_t lock;
	bool probed;	 /* engine facts below are known */
	int ncpu;	 /* CPUs the engine has */
	char driver[64]; /* storage driver */
	char backing[64];
	char *socket_path;    /* unix:// engines: the socket, for mount_docker_socket */
	cae_chan_table chans; /* this process's streams to the containers' helpers */
	char *slots_dir;      /* the engine-slot semaphore (engine_slot_take); NULL: no limit */
};

static struct docker_impl *impl_of(cae_backend *b)
{
	return b->impl;
}

static void container_name(char *buf, size_t size, const char *uuid)
{
	snprintf(buf, size, NAME_PREFIX "%s", uuid);
}

static void creating_name(char *buf, size_t size, const char *uuid)
{
	snprintf(buf, size, NAME_PREFIX "%s" CREATING_SUFFIX, uuid);
}

#define UUID_BUF CAE_ENV_UUID_MAX

static const char *label(json_t *labels, const char *k)
{
	return json_string_value(json_object_get(labels, k));
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A container's labels and name, from either form: inspect's (Config.Labels, Name) or the
 * list's (Labels, Names[0]). Podman's list also has "Config": null and "Name": "". */
static json_t *labels_of(json_t *c)
{
	json_t *config = json_object_get(c, "Config");
	return json_object_get(json_is_object(config) ? config : c, "Labels");
}

static const char *name_of(json_t *c)
{
	const char *n = json_string_value(json_object_get(c, "Name"));
	return n && *n ? n : json_string_value(json_array_get(json_object_get(c, "Names"), 0));
}

/* What a container (inspect or list form) is to us: a finished environment (its final
 * name), an unfinished one (the creating name), or none of ours; uuid gets the task's.
 * A container claimed from the warm pool has no task label (labels never change): its
 * name says whose it is, and whether its prepare still runs is told by time alone, as
 * for a prepare on another host: its pool's maximum age plus the clone's timeout after
 * the pool made it (it was claimed younger than that age). */
static cae_env_phase container_phase(const cae_backend *b, json_t *c, char uuid[UUID_BUF])
{
	json_t *labels = labels_of(c);
	const char *u = label(labels, LABEL_UUID);
	const char *pool = label(labels, CAE_POOL_LABEL);
	const char *n = name_of(c);
	uuid[0] = '\0';
	if (!n || (!u && !pool))
		return CAE_ENV_NOT_OURS;
	if (*n == '/')
		n++;
	size_t pl = strlen(NAME_PREFIX);
	if (strncmp(n, NAME_PREFIX, pl) != 0)
		return CAE_ENV_NOT_OURS;
	const char *rest = n + pl;
	bool creating;
	if (u) {
		size_t ul = strlen(u);
		if (!cae_task_uuid_valid(u) || strncmp(rest, u, ul) != 0)
			return CAE_ENV_NOT_OURS;
		if (rest[ul] != '\0' && strcmp(rest + ul, CREATING_SUFFIX) != 0)
			return CAE_ENV_NOT_OURS;
		creating = rest[ul] != '\0';
		snprintf(uuid, UUID_BUF, "%s", u);
	} else {
		creating = ends_with(rest, CREATING_SUFFIX);
		size_t ul = strlen(rest) - (creating ? strlen(CREATING_SUFFIX) : 0);
		if (ul >= UUID_BUF)
			return CAE_ENV_NOT_OURS;
		snprintf(uuid, UUID_BUF, "%.*s", (int)ul, rest);
		if (!cae_task_uuid_valid(uuid)) {
			uuid[0] = '\0';
			return CAE_ENV_NOT_OURS;
		}
	}
	if (!creating)
		return CAE_ENV_FINAL;
	int more = 0;
	if (!u) {
		const char *age = label(labels, CAE_POOL_LABEL_MAX_AGE);
		long max_age = age ? strtol(age, NULL, 10) : 0;
		more = max_age > 0 && max_age < INT_MAX / 2 ? (int)max_age : 0;
	}
	return cae__env_unfinished(b->cfg, u ? label(labels, LABEL_PREPARER) : NULL,
				   cae__parse_iso8601(label(labels, LABEL_CREATED)), more);
}

/* ---- engine slots ----
 * Container create, start, stop and remove are what a busy engine gets slow at; every cae
 * process with the same state directory takes one of
 * command_executor.docker.max_concurrent_engine_ops slots (src/backend/slots.c) around
 * them. The clone and commands are not limited. */

/* A slot's fd (give it to engine_slot_give), or -1 with the step to go on without one when
 * the semaphore itself fails (a state directory that cannot be written: a warning, not a
 * failed prepare); < -1 only when cancelled (-ECANCELED). */
static int engine_slot_take(cae_backend *b, int cancel_fd, cae_error *err)
{
	struct docker_impl *di = impl_of(b);
	if (!di->slots_dir)
		return -1;
	int fd = -1;
	cae_error e = {0};
	int r = cae__slot_acquire(di->slots_dir,
				  b->cfg->command_executor.docker.max_concurrent_engine_ops, true,
				  cancel_fd, &fd, &e);
	if (r == -ECANCELED)
		return cae_error_set(err, r, "%s", e.message);
	if (r < 0)
		cae_log_event(b->log, CAE_LOG_WARN, "docker.engine_slot_failed",
			      "engine operations not limited: %s", e.message);
	return fd;
}

static void engine_slot_give(int fd)
{
	cae__slot_release(fd);
}

/* ---- engine facts (once per backend) ---- */

static void probe_engine(struct docker_impl *di)
{
	pthread_mutex_lock(&di->lock);
	bool done = di->probed;
	pthread_mutex_unlock(&di->lock);
	if (done)
		return;
	json_t *info = NULL;
	if (cae_docker_info(di->d, &info, NULL) < 0)
		return;
	pthread_mutex_lock(&di->lock);
	di->ncpu = (int)json_integer_value(json_object_get(info, "NCPU"));
	const char *backing;
	snprintf(di->driver, sizeof(di->driver), "%s", cae__docker_driver(info, &backing));
	snprintf(di->backing, sizeof(di->backing), "%s", backing);
	di->probed = true;
	pthread_mutex_unlock(&di->lock);
	json_decref(info);
}

const char *cae__docker_driver(json_t *info, const char **backing)
{
	*backing = "";
	size_t i;
	json_t *kv;
	json_array_foreach(json_object_get(info, "DriverStatus"), i, kv)
	{
		const char *k = json_string_value(json_array_get(kv, 0));
		const char *v = json_string_value(json_array_get(kv, 1));
		if (k && v && strcmp(k, "Backing Filesystem") == 0)
			*backing = v;
	}
	const char *driver = json_string_value(json_object_get(info, "Driver"));
	return driver ? driver : "";
}

bool cae__docker_driver_sized(const char *driver, const char *backing)
{
	if (strcmp(driver, "overlay2") == 0)
		return strcmp(backing, "xfs") == 0;
	return strcmp(driver, "btrfs") == 0 || strcmp(driver, "zfs") == 0 ||
	       strcmp(driver, "devicemapper") == 0 || strcmp(driver, "windowsfilter") == 0;
}

static bool disk_limit_supported(struct docker_impl *di)
{
	return cae__docker_driver_sized(di->driver, di->backing);
}

/* The context of the exec callback of the shared prepare steps (clone, dependencies). */
struct prep_ctx {
	cae_backend *b;
	const char *uuid;
	const char *id;
	int cancel_fd;	 /* -1: none */
	bool has_helper; /* the container was made with cae-helper */
	/* the prepare's own stream to the container's helper, opened on the first step: a step
	 * then costs a fork in the container, not an Engine API exec; NULL with mux_tried: none
	 * (plain execs) */
	cae_helper_mux *mux;
	bool mux_tried;
	char *forge;	   /* the forge rule's (net-local.h) */
	cae_net_proxy *px; /* the network of the prepare's own stream (a clone under none) */
	bool net_tried;
};

/* One docker prepare in progress. */
struct docker_prep {
	const char *image;    /* borrowed from the config */
	bool with_disk;	      /* the disk limit is applied */
	char *disk_dir;	      /* the workspace on a file system of its own (diskfs.h); NULL: not */
	int disk_lock;	      /* its flock while the container is made */
	char *helper;	      /* the static helper to upload; NULL: none on this host */
	char *git_credential; /* LABEL_GIT_CREDENTIAL's value, NULL: none */
	char *id;	      /* the container, once created */
	bool claimed;	      /* from the warm pool: its record goes with the protected paths */
	size_t task_warnings; /* p->warnings before this backend's (the environment's fallback) */
	struct prep_ctx pc;
};

static struct docker_prep *prep_of(cae_prepare *p)
{
	return p->state;
}

/* ---- the container's configuration ---- */

static const char *network_mode(const cae_config *cfg)
{
	/* a filtered network: no route out but the helper's tunnels to cae's proxy */
	if (cae_net_config_filtered(cfg))
		return "none";
	switch (cfg->command_executor.docker.network.mode) {
	case CAE_CONFIG_NETWORK_NONE:
		return "none";
	case CAE_CONFIG_NETWORK_HOST:
		return "host";
	case CAE_CONFIG_NETWORK_BRIDGE:
	default:
		return "bridge";
	}
}

/* The shared package caches (pkgcache.h): this host's directory bound in when the engine is
 * this host's, owned by the container's user (uid 1000); the variables that point commands
 * at it (new; NULL: none). */
static json_t *cache_binds(cae_prepare *p, json_t *binds)
{
	const cae_config *cfg = p->b->cfg;
	if (!cfg->command_executor.package_cache.enabled)
		return NULL;
	if (!impl_of(p->b)->socket_path) {
		cae__prepare_warn(p, "package_cache.unavailable",
				  "the shared package cache is not used: the engine is not this "
				  "host's (command_executor.docker.socket)");
		return NULL;
	}
	char dir[PATH_MAX], bind[PATH_MAX + 64];
	cae_error err;
	cae_error_clear(&err);
	int r = cae__pkgcache_npm_dir(cfg, "docker", 1000, 1000, true, dir, sizeof(dir), &err);
	if (r <= 0) {
		if (r < 0) {
			char w[1200];
			snprintf(w, sizeof(w), "the shared package cache is not used: %.1100s",
				 err.message);
			cae__prepare_warn(p, "package_cache.unavailable", w);
		}
		return NULL;
	}
	snprintf(bind, sizeof(bind), "%s:%s", dir, CAE_PKGCACHE_NPM);
	json_array_append_new(binds, json_string(bind));
	/* Go's build caches of the images, cae's, read-only (pkgcache-docker.c) */
	if (cae__pkgcache_go_docker_dir(cfg, dir, sizeof(dir), &err) == 1) {
		snprintf(bind, sizeof(bind), "%s:%s:ro", dir, CAE_PKGCACHE_GO_DOCKER);
		json_array_append_new(binds, json_string(bind));
	}
	json_t *env = json_array();
	/* Go's module proxy, cae's, read-only (pkgcache-gomod.c) */
	bool gomod = cae__pkgcache_gomod_dir(cfg, true, dir, sizeof(dir), &err) == 1;
	if (gomod) {
		snprintf(bind, sizeof(bind), "%s:%s:ro", dir, CAE_PKGCACHE_GO_MOD);
		json_array_append_new(binds, json_string(bind));
		json_array_append_new(env, json_string(cae__pkgcache_gomod_env()));
	}
	/* pip's wheels, cae's, read-only (pkgcache-pip.c) */
	if (cae__pkgcache_pip_dir(cfg, true, dir, sizeof(dir), &err) == 1) {
		snprintf(bind, sizeof(bind), "%s:%s:ro", dir, CAE_PKGCACHE_PIP_WHEELS);
		json_array_append_new(binds, json_string(bind));
		for (const char *const *e = cae__pkgcache_pip_env(); *e; e++)
			json_array_append_new(env, json_string(*e));
	}
	/* Maven's repository, cae's, read-only (pkgcache-maven.c) */
	if (cae__pkgcache_maven_dir(cfg, true, dir, sizeof(dir), &err) == 1) {
		snprintf(bind, sizeof(bind), "%s:%s:ro", dir, CAE_PKGCACHE_MAVEN);
		json_array_append_new(binds, json_string(bind));
	}
	for (const char *const *e = cae__pkgcache_env(); *e; e++)
		json_array_append_new(env, json_string(*e));
	return env;
}

/* The environment's directory for the proxy's listeners (net-handover.h) when the engine is
 * this host's (new; NULL: none): named by the uuid, or for a container made in the warm
 * pool by its label. */
static char *net_dir_of(cae_backend *b, const char *uuid)
{
	return impl_of(b)->socket_path
		   ? cae__net_handover_dir(b->cfg->command_executor.state_dir, uuid)
		   : NULL;
}

json_t *cae__docker_pool_net_body(cae_backend *b, json_t *body, const char *name)
{
	const char *mode =
	    json_string_value(json_object_get(json_object_get(body, "HostConfig"), "NetworkMode"));
	/* ('@' is in no task uuid: never the directory of an environment of that name) */
	char dn[160];
	snprintf(dn, sizeof(dn), "pool@%s", name);
	_cleanup_free_ char *dir = NULL;
	if (!impl_of(b)->socket_path || !mode || strcmp(mode, "none") != 0 ||
	    cae__net_handover_dir_make(b->cfg->command_executor.state_dir, dn, &dir) < 0)
		return NULL;
	json_t *own = json_deep_copy(body);
	json_t *hc = json_object_get(own, "HostConfig");
	json_t *binds = json_object_get(hc, "Binds");
	if (!binds) {
		binds = json_array();
		json_object_set_new(hc, "Binds", binds);
	}
	char bind[PATH_MAX + 64];
	snprintf(bind, sizeof(bind), "%s:%s:ro", dir, CAE_NET_HANDOVER_MOUNT);
	json_array_append_new(binds, json_string(bind));
	json_object_set_new(json_object_get(own, "Labels"), LABEL_NET_DIR, json_string(dn));
	return own;
}

/* A container whose connections go to cae's proxy gets its own directory for the handover
 * of the helper's listeners, read-only; the warm pool's spec (made for no task: uuid "pool")
 * does not: each pool container gets its own when it is made (cae__docker_pool_net_body).
 * Without one, the helper tunnels over the stream. */
static void net_binds(cae_prepare *p, json_t *binds)
{
	const cae_config *cfg = p->b->cfg;
	_cleanup_free_ char *forge = cae__net_forge(cfg, p->task);
	_cleanup_free_ char *dir = NULL;
	if (!impl_of(p->b)->socket_path || strcmp(p->task->uuid, "pool") == 0 ||
	    !cae__net_proxied(cfg, "docker", forge) ||
	    cae__net_handover_dir_make(cfg->command_executor.state_dir, p->task->uuid, &dir) < 0)
		return;
	char bind[PATH_MAX + 64];
	snprintf(bind, sizeof(bind), "%s:%s:ro", dir, CAE_NET_HANDOVER_MOUNT);
	json_array_append_new(binds, json_string(bind));
}

/* Builds the create body. Warnings about what could not be applied go to warnings. */
static json_t *container_config(cae_prepare *p, bool with_disk)
{
	struct docker_impl *di = impl_of(p->b);
	const cae_config *cfg = p->b->cfg;
	const __typeof__(cfg->command_executor.docker) *dk = &cfg->command_executor.docker;
	bool helper = prep_of(p)->helper != NULL;
	json_t *hc = json_pack("{s:b, s:[s], s:[s], s:s, s:{s:s}}", "Init", !helper, "CapDrop",
			       "ALL", "SecurityOpt", "no-new-privileges", "NetworkMode",
			       network_mode(cfg), "RestartPolicy", "Name", "no");
	double cpus = dk->resources.cpu_limit;
	if (cpus > 0) {
		if (di->ncpu > 0 && cpus > di->ncpu) {
			char w[160];
			snprintf(w, sizeof(w),
				 "cpu_limit %g is more than the engine's %d CPUs; using %d", cpus,
				 di->ncpu, di->ncpu);
			cae__prepare_warn(p, "docker.cpu_limit_clamped", w);
			cpus = di->ncpu;
		}
		json_object_set_new(hc, "NanoCpus", json_integer((json_int_t)llround(cpus * 1e9)));
	}
	if (dk->resources.memory_bytes > 0) {
		json_object_set_new(hc, "Memory",
				    json_integer((json_int_t)dk->resources.memory_bytes));
		/* Memory + swap = memory: no swap beyond the limit. */
		json_object_set_new(hc, "MemorySwap",
				    json_integer((json_int_t)dk->resources.memory_bytes));
	}
	if (dk->resources.pids_limit > 0)
		json_object_set_new(hc, "PidsLimit", json_integer(dk->resources.pids_limit));
	if (dk->resources.disk_bytes > 0 && with_disk) {
		char size[32];
		snprintf(size, sizeof(size), "%llu", (unsigned long long)dk->resources.disk_bytes);
		json_object_set_new(hc, "StorageOpt", json_pack("{s:s}", "size", size));
	}
	json_t *binds = json_array();
	/* Host mounts: none, except the Docker socket when configured (with a warning,
	 * since it gives the agent root on the host). The in-container helper's read-only bind
	 * mount will be added here too. */
	if (dk->mount_docker_socket) {
		const char *sock = di->socket_path ? di->socket_path : "/var/run/docker.sock";
		char bind[PATH_MAX + 64];
		snprintf(bind, sizeof(bind), "%s:/var/run/docker.sock", sock);
		json_array_append_new(binds, json_string(bind));
		cae__prepare_warn(
		    p, "docker.socket_mounted",
		    "the host Docker socket is mounted into the container "
		    "(command_executor.docker.mount_docker_socket): the agent can control "
		    "the host's Docker engine");
	}
	json_t *env = cache_binds(p, binds);
	net_binds(p, binds);
	/* the workspace's own file system: a mount (not a bind, which the engine would make as
	 * an empty directory where it does not see our files) */
	if (prep_of(p)->disk_dir) {
		char src[PATH_MAX];
		snprintf(src, sizeof(src), "%s/workspace", prep_of(p)->disk_dir);
		json_object_set_new(hc, "Mounts",
				    json_pack("[{s:s, s:s, s:s}]", "Type", "bind", "Source", src,
					      "Target", WORKSPACE));
	}
	if (json_array_size(binds) > 0)
		json_object_set_new(hc, "Binds", binds);
	else
		json_decref(binds);
	if (cae_net_config_filtered(cfg) && !helper)
		cae__prepare_warn(p, "docker.network_proxy_unavailable",
				  "the container has no cae-helper: with "
				  "command_executor.docker.network filtered it has no network at "
				  "all (network none)");

	json_t *entry = json_array();
	if (helper) {
		char lifetime[24];
		snprintf(lifetime, sizeof(lifetime), "%d",
			 cfg->command_executor.docker.helper_lifetime_seconds);
		json_array_append_new(entry, json_string(HELPER_PATH));
		json_array_append_new(entry, json_string("--init"));
		json_array_append_new(entry, json_string("--lifetime"));
		json_array_append_new(entry, json_string(lifetime));
	} else {
		for (const char *const *a = pid1_argv; *a; a++)
			json_array_append_new(entry, json_string(*a));
	}
	_cleanup_free_ char *wtext = json_dumps(p->warnings, JSON_COMPACT);
	char preparer[CAE_PREPARER_MAX];
	cae__preparer_label(preparer, sizeof(preparer));
	json_t *labels = json_pack("{s:s, s:s, s:s, s:s, s:s}", LABEL_UUID, p->task->uuid,
				   LABEL_ENV, p->environment, LABEL_CREATED, p->created_at,
				   LABEL_WARNINGS, wtext ? wtext : "[]", LABEL_PREPARER, preparer);
	json_object_set_new(labels, CAE_LABEL_INSTANCE, json_string(p->b->instance));
	if (helper)
		json_object_set_new(labels, LABEL_HELPER, json_string("1"));
	if (prep_of(p)->git_credential)
		json_object_set_new(labels, LABEL_GIT_CREDENTIAL,
				    json_string(prep_of(p)->git_credential));
	char *forge = cae__net_forge(cfg, p->task);
	if (forge)
		json_object_set_new(labels, LABEL_FORGE, json_string(forge));
	free(forge);
	json_t *body =
	    json_pack("{s:s, s:o, s:[], s:s, s:s, s:o, s:i, s:o}", "Image", prep_of(p)->image,
		      "Entrypoint", entry, "Cmd", "User", CONTAINER_USER, "WorkingDir", PROJECT,
		      "Labels", labels, "StopTimeout", STOP_TIMEOUT_S, "HostConfig", hc);
	if (env)
		json_object_set_new(body, "Env", env);
	return body;
}

/* ---- the engine's view of an environment ---- */

/* What a container records (cae_envs_ops.record), from GET /containers/{id}/json or an
 * element of GET /containers/json. */
static void container_record(const cae_backend *b, json_t *c, cae_env_record *rec)
{
	memset(rec, 0, sizeof(*rec));
	rec->phase = container_phase(b, c, rec->uuid);
	if (rec->phase == CAE_ENV_NOT_OURS)
		return;
	json_t *labels = labels_of(c);
	const char *state =
	    json_string_value(json_object_get(json_object_get(c, "State"), "Status"));
	if (!state)
		state = json_string_value(json_object_get(c, "State")); /* list form */
	snprintf(rec->status, sizeof(rec->status), "%s",
		 state && strcmp(state, "running") == 0 ? "ready"
		 : state				? state
							: "unknown");
	rec->id = json_string_value(json_object_get(c, "Id"));
	rec->environment = label(labels, LABEL_ENV);
	rec->created_at = label(labels, LABEL_CREATED);
	rec->created = cae__parse_iso8601(rec->created_at);
	if (rec->created < 0)
		rec->created = (int64_t)json_integer_value(json_object_get(c, "Created"));
	rec->warnings = label(labels, LABEL_WARNINGS);
	rec->instance = label(labels, CAE_LABEL_INSTANCE);
}

static const cae_envs_ops envs_ops;

/* ---- exec ---- */

static int map_exec_error(cae_backend *b, int r, const char *uuid, cae_error *err)
{
	char name[128], creating[160];
	container_name(name, sizeof(name), uuid);
	creating_name(creating, sizeof(creating), uuid);
	json_t *c = NULL;
	if (r == -ESRCH && cae_docker_container_inspect(impl_of(b)->d, creating, &c, NULL) == 0) {
		char u[UUID_BUF];
		cae_env_phase ph = container_phase(b, c, u);
		json_decref(c);
		if (ph == CAE_ENV_CREATING || ph == CAE_ENV_FAILED)
			return cae__env_not_ready(uuid, ph, err);
	}
	if (r == -ESRCH)
		return cae_error_set(err, -ENOENT,
				     "environment gone: container %s no longer exists", name);
	if (r == -EAGAIN)
		return cae_error_set(err, -EAGAIN,
				     "environment %s is not ready: container %s is not "
				     "running",
				     uuid, name);
	return r;
}

static void fill_spec(cae_docker_exec_spec *spec, const cae_exec_request *req, const char *cwd)
{
	*spec = (cae_docker_exec_spec){
	    .argv = req->argv,
	    .env = req->extra_env,
	    .cwd = cwd,
	    .stdin_data = req->stdin_data,
	    .stdin_len = req->stdin_len,
	    .has_stdin = req->has_stdin,
	    .timeout_ms = req->timeout_ms,
	    .max_stdout = req->max_stdout,
	    .max_stderr = req->max_stderr,
	    .truncate = req->truncate,
	    .cancel_fd = req->cancel_fd,
	};
}

static void log_kill(cae_backend *b, const char *uuid, const cae_docker_exec_info *xi)
{
	if (xi->restarted)
		cae_log_fields(b->log, CAE_LOG_WARN, "docker.container_restarted",
			       json_pack("{s:s, s:s}", "task_uuid", uuid, "exec_id", xi->exec_id),
			       "the command's processes could not be killed by exec (pids limit?); "
			       "the container was restarted");
	else if (xi->kill_failed)
		cae_log_fields(b->log, CAE_LOG_WARN, "docker.kill_failed",
			       json_pack("{s:s, s:s}", "task_uuid", uuid, "exec_id", xi->exec_id),
			       "the command's processes could not be killed");
}

/* ---- the helper channel ---- */

static ssize_t link_read(void *ctx, char *buf, size_t n)
{
	return cae_docker_stream_read(ctx, buf, n);
}

static int link_write(void *ctx, const void *p, size_t n)
{
	return cae_docker_stream_write(ctx, p, n);
}

static void link_close(void *ctx)
{
	cae_docker_stream_close(ctx);
}

/* The helper's multiplexed stream over st, an attached exec of `cae-helper --stream`
 * (cae_helper_mux_open: 0 with *m, or its error). */
static int mux_over(cae_docker_stream *st, cae_helper_mux **m, cae_error *err)
{
	cae_helper_link link = {.fd = cae_docker_stream_fd(st),
				.read = link_read,
				.write = link_write,
				.close = link_close,
				.ctx = st};
	return cae_helper_mux_open(&link, HELPER_OPEN_TIMEOUT_MS, m, err);
}

/* A container whose helper ended it after its lifetime without a manager is started again
 * (files and all); true when that was done. */
static bool restart_expired(cae_backend *b, const char *uuid, const char *name)
{
	cae_docker *d = impl_of(b)->d;
	json_t *c = NULL;
	if (cae_docker_container_inspect(d, name, &c, NULL) < 0)
		return false;
	json_t *state = json_object_get(c, "State");
	bool expired =
	    !json_is_true(json_object_get(state, "Running")) &&
	    json_integer_value(json_object_get(state, "ExitCode")) == CAE_HELPER_INIT_EXPIRED &&
	    label(json_object_get(json_object_get(c, "Config"), "Labels"), LABEL_HELPER);
	json_decref(c);
	if (expired)
		cae_log_fields(b->log, CAE_LOG_INFO, "docker.restart_expired",
			       json_pack("{s:s}", "container", name), NULL);
	/* its workspace's file system first (gone after a reboot): never an empty bind */
	_cleanup_free_ char *disk =
	    cae__diskfs_container_dir(b->cfg->command_executor.state_dir, uuid);
	if (expired && disk && cae__diskfs_container_remount(disk, NULL) < 0)
		return false;
	return expired && cae_docker_container_start(d, name, NULL) == 0;
}

/* Whether the container was made with a helper (its label says so). */
static bool has_helper(cae_backend *b, const char *name)
{
	json_t *c = NULL;
	if (cae_docker_container_inspect(impl_of(b)->d, name, &c, NULL) < 0)
		return false;
	bool h = label(json_object_get(json_object_get(c, "Config"), "Labels"), LABEL_HELPER);
	json_decref(c);
	return h;
}

/* A container claimed from the warm pool keeps its task's credential target and forge in
 * files of root's that the claim wrote (the user can read them, not change them): path's
 * text; NULL: none. */
static char *claimed_record(cae_backend *b, const char *name, const char *path)
{
	const char *argv[] = {"cat", path, NULL};
	cae_docker_exec_spec spec = {.argv = argv,
				     .user = "0:0",
				     .raw = true,
				     .timeout_ms = HELPER_OPEN_TIMEOUT_MS,
				     .max_stdout = 1024,
				     .max_stderr = 1024,
				     .cancel_fd = -1};
	cae_run_result res;
	if (cae_docker_exec(impl_of(b)->d, name, &spec, &res, NULL, NULL) < 0)
		return NULL;
	char *v = res.exit_code == 0 && res.out && *res.out ? strdup(res.out) : NULL;
	cae_run_result_clear(&res);
	return v;
}

/* Where a push from the container may authenticate ("host user forge") and the forge rule's
 * "host:port" (net-local.h): their labels, or the claim's files for one from the warm pool
 * (the forge only when it matters: a network none or filtered); new, NULL: none. */
static void task_records(cae_backend *b, const char *name, char **target, char **forge,
			 char **net_dir)
{
	*target = *forge = *net_dir = NULL;
	json_t *c = NULL;
	if (cae_docker_container_inspect(impl_of(b)->d, name, &c, NULL) < 0)
		return;
	json_t *labels = json_object_get(json_object_get(c, "Config"), "Labels");
	const char *v = label(labels, LABEL_GIT_CREDENTIAL), *f = label(labels, LABEL_FORGE);
	bool pool = label(labels, CAE_POOL_LABEL) != NULL;
	*target = v ? strdup(v) : pool ? claimed_record(b, name, CAE_POOL_CLAIM_CREDENTIAL) : NULL;
	bool netted = cae__net_none(b->cfg, "docker") || cae_net_config_filtered(b->cfg);
	*forge = f		  ? strdup(f)
		 : pool && netted ? claimed_record(b, name, CAE_POOL_CLAIM_FORGE)
				  : NULL;
	const char *nd = label(labels, LABEL_NET_DIR);
	*net_dir = nd ? net_dir_of(b, nd) : NULL;
	json_decref(c);
}

/* The channel to uuid's helper (cae_chan_ops.open): a stream, or none with why set when the
 * container should have had one. Fails (-ESRCH, -EAGAIN, ...) when the container cannot run
 * anything; a container its helper stopped after its lifetime is started again. */
static int chan_open(cae_backend *b, cae_chan *c, bool preparing, cae_error *err)
{
	char name[128], hb[16];
	container_name(name, sizeof(name), c->uuid);
	cae__chan_heartbeat(b->cfg, hb, sizeof(hb));
	const char *argv[] = {HELPER_PATH, "--stream", "--heartbeat", hb, NULL};
	/* another instance's container runs nothing of ours (it is "not found" to us) */
	json_t *ci = NULL;
	if (!preparing && cae_docker_container_inspect(impl_of(b)->d, name, &ci, NULL) == 0) {
		bool own = cae__backend_own(
		    b, label(json_object_get(json_object_get(ci, "Config"), "Labels"),
			     CAE_LABEL_INSTANCE));
		json_decref(ci);
		if (!own)
			return cae_error_set(err, -ENOENT, "no environment for task %s", c->uuid);
	}
	cae_docker_stream *st = NULL;
	int r =
	    cae_docker_attach(impl_of(b)->d, name, argv, NULL, HELPER_OPEN_TIMEOUT_MS, &st, err);
	if (r == -EAGAIN && restart_expired(b, c->uuid, name))
		r = cae_docker_attach(impl_of(b)->d, name, argv, NULL, HELPER_OPEN_TIMEOUT_MS, &st,
				      err);
	if (r < 0)
		return r;
	cae_error e = {0};
	if (mux_over(st, &c->m, &e) == 0) {
		_cleanup_free_ char *target = NULL;
		task_records(b, name, &target, &c->forge, &c->net_dir);
		cae__chan_credentials(c, target);
		if (!c->net_dir)
			c->net_dir = net_dir_of(b, c->uuid);
	} else {
		c->m = NULL;
		if (has_helper(b, name))
			cae__chan_unanswered(c, &e);
	}
	return 0;
}

/* The helper's stream failed during a call (cae_chan_ops.gone): -ECONNABORTED when the
 * container stopped or went (-ECONNRESET: the engine did), 0 when only the helper did. */
static int container_stopped(cae_backend *b, const char *uuid, cae_error *err)
{
	char name[128];
	container_name(name, sizeof(name), uuid);
	return cae_docker_container_still_running(impl_of(b)->d, name, err);
}

/* A command without a helper (cae_chan_ops.plain): a plain exec, with the wrapper's checks
 * and tree kill. */
static int plain_exec(cae_backend *b, const char *uuid, const cae_exec_request *req,
		      const char *cwd, cae_run_result *res, cae_error *err)
{
	char name[128];
	container_name(name, sizeof(name), uuid);
	cae_docker_exec_spec spec;
	fill_spec(&spec, req, cwd);
	spec.confine = WORKSPACE;
	spec.allow_restart = true;
	cae_docker_exec_info xi;
	int r = cae_docker_exec(impl_of(b)->d, name, &spec, res, &xi, err);
	log_kill(b, uuid, &xi);
	return r < 0 ? map_exec_error(b, r, uuid, err) : 0;
}

static const cae_chan_ops chan_ops = {
    .open = chan_open,
    .gone = container_stopped,
    .plain = plain_exec,
    .unusable = map_exec_error,
    .workspace = WORKSPACE,
    .project = PROJECT,
    .what = "container",
    .plain_how = "a plain Engine API exec",
    .failed_note = "the next command starts a new one",
};

static int docker_exec(cae_backend *b, const char *uuid, const cae_exec_request *req,
		       cae_run_result *res, cae_error *err)
{
	return cae__chan_exec(&impl_of(b)->chans, uuid, false, req, res, err);
}

static int docker_edit(cae_backend *b, const char *uuid, const cae_editor_limits *limits,
		       const cae_editor_request *req, cae_editor_result *res, cae_error *err)
{
	return cae__chan_edit(&impl_of(b)->chans, uuid, limits, req, res, err);
}

static int docker_fs(cae_backend *b, const char *uuid, const cae_fs_request *q, cae_fs_reply *rep,
		     cae_error *err)
{
	return cae__chan_fs(&impl_of(b)->chans, uuid, q, rep, err);
}

static json_t *docker_network_denied(cae_backend *b, const char *uuid)
{
	return cae__chan_network_denied(&impl_of(b)->chans, uuid);
}

static int docker_port_forward(cae_backend *b, const char *uuid, int port, int *host_port,
			       cae_error *err)
{
	return cae__chan_port_forward(&impl_of(b)->chans, uuid, port, host_port, err);
}

int cae__docker_open_stream(cae_backend *b, const char *name, cae_helper_mux **mux)
{
	*mux = NULL;
	const char *argv[] = {HELPER_PATH, "--stream", NULL};
	cae_docker_stream *st = NULL;
	int r =
	    cae_docker_attach(impl_of(b)->d, name, argv, NULL, HELPER_OPEN_TIMEOUT_MS, &st, NULL);
	if (r == -ESRCH || r == -EAGAIN || r == -ENOENT)
		return -EBUSY;
	if (r < 0)
		return r;
	return mux_over(st, mux, NULL) < 0 ? -ENOTCONN : 0;
}

/* The prepare's stream to the container's helper, or NULL (no helper there, or it did not
 * answer: the steps use plain execs). */
static cae_helper_mux *prep_mux_open(struct prep_ctx *p)
{
	cae_helper_mux *m = NULL;
	return cae__docker_open_stream(p->b, p->id, &m) == 0 ? m : NULL;
}

static int prep_exec(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err)
{
	struct prep_ctx *p = ctx;
	if (!p->mux_tried && p->id && p->has_helper) {
		p->mux_tried = true;
		p->mux = prep_mux_open(p);
	}
	if (p->mux && !p->net_tried) {
		p->net_tried = true;
		/* (a container claimed from the warm pool has its directory by its label) */
		_cleanup_free_ char *dir = NULL;
		if (cae__net_proxied(p->b->cfg, "docker", p->forge)) {
			json_t *c = NULL;
			if (cae_docker_container_inspect(impl_of(p->b)->d, p->id, &c, NULL) == 0) {
				const char *nd =
				    label(json_object_get(json_object_get(c, "Config"), "Labels"),
					  LABEL_NET_DIR);
				dir = nd ? net_dir_of(p->b, nd) : NULL;
			}
			json_decref(c);
		}
		if (!dir)
			dir = net_dir_of(p->b, p->uuid);
		p->px = cae__net_mux_start(p->b, p->mux, p->uuid, p->forge, "container", true, dir);
	}
	if (p->mux && cae_helper_mux_alive(p->mux)) {
		cae_run_spec rs = cae__backend_run_spec(req, req->cwd ? req->cwd : WORKSPACE, NULL);
		if (req->cancel_fd < 0)
			rs.cancel_fd = p->cancel_fd;
		int r = cae_helper_mux_run(p->mux, &rs, req->extra_env, NULL, res, err);
		/* a stream gone before the step was taken: the step did not run, a plain exec
		 * runs it; one that ended during it is the container's failure, reported */
		if (r != -EPIPE)
			return r == -ECONNRESET ? map_exec_error(p->b, r, p->uuid, err) : r;
	}
	cae_docker_exec_spec spec;
	fill_spec(&spec, req, req->cwd ? req->cwd : WORKSPACE);
	if (req->cancel_fd < 0)
		spec.cancel_fd = p->cancel_fd;
	cae_docker_exec_info xi;
	int r = cae_docker_exec(impl_of(p->b)->d, p->id, &spec, res, &xi, err);
	log_kill(p->b, p->uuid, &xi);
	return r < 0 ? map_exec_error(p->b, r, p->uuid, err) : 0;
}

/* ---- removal ---- */

/* Stops (gracefully, then killed after stop_s) and removes the container with its
 * volumes, up to REMOVE_ATTEMPTS times; then any task network of the same name. A missing
 * container is success. */
static int remove_container(cae_backend *b, const char *uuid, const char *name, int stop_s,
			    cae_error *err)
{
	cae_docker *d = impl_of(b)->d;
	int r = 0;
	cae_error e = {0};
	/* nothing to remove (a prepare's clean start, mostly) needs no engine slot */
	json_t *c = NULL;
	r = cae_docker_container_inspect(d, name, &c, NULL);
	/* a warm pool container's handover directory goes with it */
	const char *nd =
	    label(json_object_get(json_object_get(c, "Config"), "Labels"), LABEL_NET_DIR);
	_cleanup_free_ char *net_dir = nd ? strdup(nd) : NULL;
	json_decref(c);
	if (r == -ENOENT)
		return 0;
	int slot = engine_slot_take(b, -1, NULL);
	for (int attempt = 0; attempt < REMOVE_ATTEMPTS; attempt++) {
		if (attempt)
			nanosleep(&(struct timespec){0, 200000000L * attempt}, NULL);
		if (stop_s >= 0) {
			r = cae_docker_container_stop(d, name, stop_s, &e);
			if (r == -ENOENT) {
				r = 0;
				break;
			}
		}
		r = cae_docker_container_remove(d, name, true, true, &e);
		if (r == 0 || r == -ENOENT) {
			r = 0;
			break;
		}
		cae_log_fields(b->log, CAE_LOG_WARN, "docker.remove_retry",
			       json_pack("{s:s, s:i}", "task_uuid", uuid, "attempt", attempt + 1),
			       "%s", e.message);
	}
	engine_slot_give(slot);
	if (r < 0)
		return cae_error_set(err, r, "could not remove container %s after %d attempts: %s",
				     name, REMOVE_ATTEMPTS, e.message);
	if (net_dir)
		cae__net_handover_dir_remove(b->cfg->command_executor.state_dir, net_dir);
	return 0;
}

/* The finished and the unfinished container of a task, then its network. */
static int remove_env(cae_backend *b, const char *uuid, int stop_s, cae_error *err)
{
	cae_docker *d = impl_of(b)->d;
	char name[128], creating[160];
	container_name(name, sizeof(name), uuid);
	creating_name(creating, sizeof(creating), uuid);
	cae_error e = {0};
	int r = remove_container(b, uuid, creating, stop_s, err);
	if (r == 0)
		r = remove_container(b, uuid, name, stop_s, err);
	if (r < 0)
		return r;
	/* its workspace's own file system, once no container binds it */
	_cleanup_free_ char *disk =
	    cae__diskfs_container_dir(b->cfg->command_executor.state_dir, uuid);
	if (disk && (r = cae__diskfs_container_release(disk)) < 0)
		return cae_error_set(err, r, "could not remove the workspace of task %s: %s", uuid,
				     strerror(-r));
	(void)cae__snapshot_docker_drop(b, uuid, NULL); /* its snapshots and base image */
	cae__net_handover_dir_remove(b->cfg->command_executor.state_dir, uuid);
	/* cae makes no per-task network, but one of the task's name is the task's: remove it. */
	char path[192];
	snprintf(path, sizeof(path), "/networks/%s", name);
	int nr = cae_docker_call(d, "DELETE", path, NULL, NULL, &e);
	if (nr < 0 && nr != -ENOENT)
		return cae_error_set(err, nr, "could not remove network %s: %s", name, e.message);
	return 0;
}

/* ---- local repositories ----
 * A task's repo may be a path on this host, which a container cannot see (and the engine
 * may be remote). It travels as a git bundle of every ref, in a one-file tar streamed with
 * PUT /containers/{id}/archive, is mirrored at SOURCE_MIRROR inside the container, and the
 * shared clone step clones from that mirror with file://, so shallow clones and pull
 * request fetches behave as for any remote. The mirror stays: it is the clone's origin. */

#define BUNDLE_NAME ".cae-src.bundle"
#define SOURCE_BUNDLE SCRATCH "/" BUNDLE_NAME
#define SOURCE_MIRROR SCRATCH "/.cae-src.git"
#define TAR_BLOCK 512

static bool is_local_repo(const char *repo)
{
	return repo && !strstr(repo, "://") && !(strchr(repo, '@') && strchr(repo, ':'));
}

static void tar_octal(char *field, size_t width, uint64_t v)
{
	/* width - 1 octal digits and a NUL */
	field[width - 1] = '\0';
	for (size_t i = width - 1; i > 0; i--) {
		field[i - 1] = (char)('0' + (v & 7));
		v >>= 3;
	}
}

/* Writes a ustar archive holding one regular file `name` (owned by uid/gid 1000, 0644) with
 * the size bytes of in_fd. */
/* One ustar entry: a regular file ('0', size bytes read from in_fd) or a directory ('5'). */
static int write_tar_entry(int out, const char *name, char type, unsigned mode, unsigned uid,
			   const char *owner, int in_fd, uint64_t size)
{
	if (strlen(name) >= 100 || size >= (1ULL << 33))
		return -EFBIG;
	char h[TAR_BLOCK];
	memset(h, 0, sizeof(h));
	memcpy(h, name, strlen(name));
	tar_octal(h + 100, 8, mode);
	tar_octal(h + 108, 8, uid);
	tar_octal(h + 116, 8, uid);
	tar_octal(h + 124, 12, size);
	tar_octal(h + 136, 12, (uint64_t)time(NULL));
	h[156] = type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memcpy(h + 265, owner, strlen(owner));
	memcpy(h + 297, owner, strlen(owner));
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (size_t i = 0; i < sizeof(h); i++)
		sum += (unsigned char)h[i];
	tar_octal(h + 148, 7, sum);
	h[155] = ' ';
	int r = cae__write_all(out, h, sizeof(h));
	char buf[64 * 1024];
	uint64_t left = size;
	while (r == 0 && left > 0) {
		ssize_t n = read(in_fd, buf, (size_t)MIN(left, (uint64_t)sizeof(buf)));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		r = cae__write_all(out, buf, (size_t)n);
		left -= (uint64_t)n;
	}
	/* pad to a block */
	memset(buf, 0, TAR_BLOCK);
	size_t pad = (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK;
	if (r == 0 && pad)
		r = cae__write_all(out, buf, pad);
	return r;
}

/* The two zero blocks that end an archive. */
static int write_tar_end(int out)
{
	char z[2 * TAR_BLOCK];
	memset(z, 0, sizeof(z));
	return cae__write_all(out, z, sizeof(z));
}

#define SCRATCH_UPLOAD "cae-upload-" /* `cae gc` knows it (src/cli/env.c) */

/* A tar written by fill(fd, ud) into a private scratch file (the Engine's archive API wants
 * its length first; `cae gc` removes the file if we die before the end: scratch.h), then
 * extracted at path in container id. what names the upload in errors. */
typedef int (*tar_fill_fn)(int fd, void *ud);

static int put_tar(cae_backend *b, const char *id, const char *path, const char *what,
		   tar_fill_fn fill, void *ud, cae_error *err)
{
	char dir[PATH_MAX];
	int r = cae__scratch_mkdtemp(NULL, SCRATCH_UPLOAD, dir, sizeof(dir));
	if (r < 0)
		return cae_error_set(err, r, "cannot create a temporary directory: %s",
				     strerror(-r));
	_cleanup_free_ char *tarpath = cae__path_join(dir, "upload.tar");
	_cleanup_close_ int fd =
	    tarpath ? open(tarpath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
	r = !tarpath ? -ENOMEM : fd < 0 ? -errno : fill(fd, ud);
	off_t size = r == 0 ? lseek(fd, 0, SEEK_CUR) : -1;
	if (r < 0 || size < 0 || lseek(fd, 0, SEEK_SET) < 0)
		r = cae_error_set(err, r < 0 ? r : -errno, "cannot stage %s: %s", what,
				  strerror(r < 0 ? -r : errno));
	else
		r = cae_docker_put_archive(impl_of(b)->d, id, path, fd, (uint64_t)size, err);
	cae__rm_rf(dir);
	return r;
}

/* One file of ours (fd, its size), as a tar entry name with the given owner and mode. */
struct tar_file {
	const char *name;
	int fd;
	mode_t mode;
	int uid;
	const char *owner;
	const char *dir; /* a directory of root's made first, or NULL */
};

static int fill_file(int out, void *ud)
{
	const struct tar_file *f = ud;
	struct stat st;
	if (fstat(f->fd, &st) < 0)
		return -errno;
	int r = f->dir ? write_tar_entry(out, f->dir, '5', 0755, 0, "root", -1, 0) : 0;
	if (r == 0)
		r = write_tar_entry(out, f->name, '0', f->mode, f->uid, f->owner, f->fd,
				    (uint64_t)st.st_size);
	return r < 0 ? r : write_tar_end(out);
}

/* Puts the static helper at HELPER_PATH in container id (created, not started): root's,
 * mode 0755, in a directory of root's, so that commands can run it but not replace it. */
static int upload_helper(cae_backend *b, const char *id, const char *helper, cae_error *err)
{
	_cleanup_close_ int in = open(helper, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return cae_error_set(err, -errno, "cannot stage cae-helper: %s", strerror(errno));
	struct tar_file f = {.name = &HELPER_PATH[1],
			     .fd = in,
			     .mode = 0755,
			     .uid = 0,
			     .owner = "root",
			     .dir = &HELPER_DIR[1]};
	int r = put_tar(b, id, "/", "cae-helper", fill_file, &f, err);
	return r < 0 ? cae_error_prefix(err, "cae-helper") : 0;
}

/* The last non-empty line of a command's stderr (or stdout), for messages. */
static void last_line(const cae_run_result *res, char *out, size_t size)
{
	const char *s = res->err && *res->err ? res->err : res->out ? res->out : "";
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	size_t start = n;
	while (start > 0 && s[start - 1] != '\n')
		start--;
	snprintf(out, size, "%.*s", (int)(n - start), s + start);
}

static int upload_local_repo(cae_backend *b, struct prep_ctx *pc, const char *repo, cae_error *err)
{
	char real[PATH_MAX];
	if (!realpath(repo, real) || !cae__is_dir(real))
		return cae_error_set(err, -ENOENT, "repository not found: %s", repo);
	/* named after this process: `cae gc` removes it if we die before the end (scratch.h) */
	char dir[PATH_MAX];
	int m = cae__scratch_mkdtemp(NULL, "cae-bundle-", dir, sizeof(dir));
	if (m < 0)
		return cae_error_set(err, m, "cannot create a temporary directory: %s",
				     strerror(-m));
	_cleanup_free_ char *bundle = cae__path_join(dir, "src.bundle");
	int r = 0;
	if (!bundle) {
		r = cae_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	/* git on this host, as the local backend's clone (the repository is the user's own), in
	 * the environment of every host git (hostgit.c) */
	const char *argv[] = {CAE_GIT_ARGV, "-C",   real,    "bundle", "create",
			      "--quiet",    bundle, "--all", NULL};
	int timeout_s = b->cfg->command_executor.clone.timeout_seconds;
	cae_run_spec spec = {.argv = argv,
			     .timeout_ms = (int64_t)(timeout_s > 0 ? timeout_s : 300) * 1000,
			     .max_stdout = 64 * 1024,
			     .max_stderr = 64 * 1024,
			     .cancel_fd = -1};
	cae_run_result res;
	char **envp = NULL;
	r = cae__hostgit_env(b->cfg, NULL, &envp, err);
	if (r < 0)
		goto out;
	spec.envp = (const char *const *)envp;
	r = cae_runner_run(&spec, &res, err);
	cae__hostgit_env_free(envp);
	if (r < 0) {
		cae_error_prefix(err, "git bundle");
		goto out;
	}
	if (res.exit_code != 0) {
		char line[512];
		last_line(&res, line, sizeof(line));
		r = cae_error_set(err, -EIO, "git bundle of the repository failed: %s", line);
		cae_run_result_clear(&res);
		goto out;
	}
	cae_run_result_clear(&res);
	{
		_cleanup_close_ int in = open(bundle, O_RDONLY | O_CLOEXEC);
		struct tar_file f = {
		    .name = BUNDLE_NAME, .fd = in, .mode = 0644, .uid = 1000, .owner = "agent"};
		r = in < 0 ? cae_error_set(err, -errno, "cannot stage the repository: %s",
					   strerror(errno))
			   : put_tar(b, pc->id, SCRATCH, "the repository", fill_file, &f, err);
		if (r < 0)
			goto out;
	}
	{
		/* git's argv after the two paths: CAE_GIT_ARGV, as for every git of ours */
		const char *mirror[] = {"sh",
					"-c",
					"b=$1 m=$2; shift 2; \"$@\" clone --quiet --mirror "
					"\"$b\" \"$m\" && rm -f \"$b\"",
					"sh",
					SOURCE_BUNDLE,
					SOURCE_MIRROR,
					CAE_GIT_ARGV,
					NULL};
		cae_exec_request req = {.argv = mirror,
					.cwd = SCRATCH,
					.timeout_ms = spec.timeout_ms,
					.max_stdout = 64 * 1024,
					.max_stderr = 64 * 1024,
					.cancel_fd = -1};
		r = prep_exec(pc, &req, &res, err);
		if (r < 0)
			goto out;
		if (res.exit_code != 0) {
			char line[512];
			last_line(&res, line, sizeof(line));
			r = cae_error_set(err, -EIO, "git clone --mirror of the bundle failed: %s",
					  line);
		}
		cae_run_result_clear(&res);
	}
out:
	cae__rm_rf(dir);
	return r;
}

/* ---- the mirror cache ----
 * A host mirror (src/backend/mirror.c) reaches the container as a plain copy of its files
 * (HEAD, config, packed-refs, refs/, objects/: no pack is made again) in a tar at
 * MIRROR_COPY, owned by the container's user: through the prepare's helper stream into the
 * image's tar when it is small (SHIP_STREAM_MAX), else (or without tar) through the archive
 * API; the clone step reads it with file:// and removes it. No container ever sees the
 * host's mirror itself. */

#define MIRROR_NAME ".cae-mirror.git"
#define MIRROR_COPY SCRATCH "/" MIRROR_NAME
#define SHIP_STREAM_MAX ((uint64_t)32 << 20)

/* The tar entries of dir/rel (a directory) and everything below it, named MIRROR_NAME/rel. */
static int tar_mirror_dir(int out, const char *dir, const char *rel)
{
	char name[PATH_MAX];
	snprintf(name, sizeof(name), "%s/%s", MIRROR_NAME, rel);
	int r = write_tar_entry(out, name, '5', 0755, 1000, "agent", -1, 0);
	_cleanup_free_ char *path = cae__path_join(dir, rel);
	DIR *d = r == 0 && path ? opendir(path) : NULL;
	if (r == 0 && !d)
		return path ? -errno : -ENOMEM;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *sub = cae__path_join(rel, e->d_name);
		_cleanup_free_ char *full = sub ? cae__path_join(dir, sub) : NULL;
		struct stat st;
		if (!full)
			r = -ENOMEM;
		else if (lstat(full, &st) < 0)
			r = -errno;
		else if (S_ISDIR(st.st_mode))
			r = tar_mirror_dir(out, dir, sub);
		else if (S_ISREG(st.st_mode)) {
			_cleanup_close_ int in = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			snprintf(name, sizeof(name), "%s/%s", MIRROR_NAME, sub);
			r = in < 0 ? -errno
				   : write_tar_entry(out, name, '0', 0644, 1000, "agent", in,
						     (uint64_t)st.st_size);
		}
	}
	if (d)
		closedir(d);
	return r;
}

static int fill_mirror(int out, void *ud)
{
	const char *dir = ud;
	int r = write_tar_entry(out, MIRROR_NAME, '5', 0755, 1000, "agent", -1, 0);
	static const char *const files[] = {"HEAD", "config", "packed-refs"};
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *full = cae__path_join(dir, files[i]);
		_cleanup_close_ int in = full ? open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
		struct stat st;
		if (in < 0 || fstat(in, &st) < 0)
			continue; /* packed-refs is there only once a ref was packed */
		char name[64];
		snprintf(name, sizeof(name), "%s/%s", MIRROR_NAME, files[i]);
		r = write_tar_entry(out, name, '0', 0644, 1000, "agent", in, (uint64_t)st.st_size);
	}
	if (r == 0)
		r = tar_mirror_dir(out, dir, "refs");
	if (r == 0)
		r = tar_mirror_dir(out, dir, "objects");
	return r < 0 ? r : write_tar_end(out);
}

/* The bytes of the regular files under path, counted until past max. */
static uint64_t tree_bytes(const char *path, uint64_t max)
{
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t n = 0;
	struct dirent *e;
	while (n <= max && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *sub = cae__path_join(path, e->d_name);
		struct stat st;
		if (!sub || lstat(sub, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode))
			n += tree_bytes(sub, max - n);
		else if (S_ISREG(st.st_mode))
			n += (uint64_t)st.st_size;
	}
	closedir(d);
	return n;
}

/* The mirror's tar (fill_mirror) through the prepare's stream into the image's tar, when it
 * is at most SHIP_STREAM_MAX: no archive upload (~40 ms of the engine's). 0 when shipped;
 * < 0 when not (too large, no tar in the image, a failure): the archive API does it. */
static int ship_through_stream(struct prep_ctx *pc, const char *mirror)
{
	if (tree_bytes(mirror, SHIP_STREAM_MAX) > SHIP_STREAM_MAX)
		return -EFBIG;
	_cleanup_close_ int fd = memfd_create("cae-mirror", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = fill_mirror(fd, (void *)mirror);
	off_t size = r == 0 ? lseek(fd, 0, SEEK_CUR) : -1;
	if (size <= 0)
		return r < 0 ? r : -EIO;
	void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	const char *argv[] = {"tar", "-x", "-f", "-", "-C", SCRATCH, NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = SCRATCH,
				.stdin_data = map,
				.stdin_len = (size_t)size,
				.has_stdin = true,
				.timeout_ms = 300 * 1000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = -1};
	cae_run_result res;
	cae_error e = {0};
	r = prep_exec(pc, &req, &res, &e);
	munmap(map, (size_t)size);
	if (r < 0)
		return r;
	r = res.exit_code == 0 ? 0 : -EIO;
	cae_run_result_clear(&res);
	return r;
}

/* cae_mirror_ship_fn: the copy of mirror in the container being prepared. */
static int ship_mirror(void *ctx, const char *mirror, char **path, cae_error *err)
{
	struct prep_ctx *pc = ctx;
	int r = ship_through_stream(pc, mirror);
	const char *through = "stream";
	if (r < 0) {
		through = "archive";
		r = put_tar(pc->b, pc->id, SCRATCH, "the repository's mirror", fill_mirror,
			    (void *)mirror, err);
	}
	if (r == 0)
		cae_log_fields(pc->b->log, CAE_LOG_DEBUG, "docker.mirror_shipped",
			       json_pack("{s:s, s:s}", "container", pc->id, "through", through),
			       NULL);
	if (r < 0)
		return r;
	*path = strdup(MIRROR_COPY);
	return *path ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}

/* ---- prepare hooks (the lifecycle is src/backend/prepare.c) ---- */

/* What bounds the container's disk, for ContainerInfo's limits: the storage driver's size
 * option, or nothing (the warnings say why). */
static void set_disk_limits(cae_prepare *p, bool with_disk, bool loopfs)
{
	uint64_t bytes = p->b->cfg->command_executor.docker.resources.disk_bytes;
	json_decref(p->limits);
	bool bounded = with_disk || loopfs;
	p->limits = json_pack("{s:{s:s, s:o?}}", "disk", "mechanism",
			      with_disk ? "storage_opt"
			      : loopfs	? "loopfs"
					: "none",
			      "bytes", bounded ? json_integer((json_int_t)bytes) : NULL);
}

static bool storage_opt_refused(const char *msg)
{
	return strstr(msg, "storage-opt") || strstr(msg, "storage opt") ||
	       strstr(msg, "StorageOpt") || strstr(msg, "quota");
}

static int docker_validate(cae_prepare *p, cae_error *err)
{
	struct docker_impl *di = impl_of(p->b);
	const cae_config *cfg = p->b->cfg;
	struct docker_prep *dp = calloc(1, sizeof(*dp));
	if (!dp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	dp->disk_lock = -1;
	p->state = dp;
	/* the shared npm cache is bound at create (cache_binds), or was into a warm pool's
	 * container made by the same configuration (its key covers the binds) */
	p->deps_opts.npm_cache_shared =
	    cfg->command_executor.package_cache.enabled && di->socket_path;
	/* a warning before this step (the environment's fallback) is the task's, not the
	 * pool's: a claim keeps it */
	dp->task_warnings = json_array_size(p->warnings);
	dp->image = cae_config_environment_image(cfg, p->environment);
	if (!dp->image)
		dp->image = cfg->command_executor.docker.base_image;
	if (!dp->image)
		return cae_error_set(err, -EINVAL, "no image for environment %s", p->environment);
	probe_engine(di);
	if (cae_helper_find_static(&dp->helper) < 0) {
		dp->helper = NULL;
		cae__prepare_warn(p, "docker.no_helper",
				  "cae-helper-static was not found on this host: commands run as "
				  "plain Engine API execs and the text editor is not available");
	}
	const __typeof__(cfg->command_executor.docker.resources) *res =
	    &cfg->command_executor.docker.resources;
	dp->with_disk = res->disk_bytes > 0 && disk_limit_supported(di);
	/* where the storage driver cannot bound the container: the workspace on a file system
	 * of its own, when the engine is this host's (a unix socket), cae is root and no warm
	 * pool serves the environment (a pool's container has no task to own one yet) */
	if (res->disk_bytes > 0 && !dp->with_disk && di->socket_path &&
	    !cae__pool_wanted(cfg, p->environment) && cae__diskfs_usable(NULL) == 0)
		dp->disk_dir =
		    cae__diskfs_container_dir(cfg->command_executor.state_dir, p->task->uuid);
	set_disk_limits(p, dp->with_disk, dp->disk_dir != NULL);
	/* true of every prepare on this engine: said once per engine per process */
	if (res->disk_bytes > 0 && !dp->with_disk && !dp->disk_dir &&
	    cae__engine_warning_first(cae_docker_host(di->d), "docker.disk_limit_unsupported")) {
		char w[256];
		snprintf(w, sizeof(w),
			 "disk limit %s not applied: storage driver %s%s%s takes no size option",
			 res->disk_limit ? res->disk_limit : "?",
			 di->driver[0] ? di->driver : "(unknown)", di->backing[0] ? " on " : "",
			 di->backing);
		cae__prepare_warn(p, "docker.disk_limit_unsupported", w);
	}
	return 0;
}

static int docker_remove(cae_backend *b, const char *uuid, bool graceful, cae_error *err)
{
	cae__chan_forget(&impl_of(b)->chans, uuid);
	/* a discarded environment (a clean start, a failed prepare) gets no grace */
	return remove_env(b, uuid, graceful ? STOP_TIMEOUT_S : -1, err);
}

/* A created container's helper (NULL: none) uploaded, then the container started. */
static int upload_and_start(cae_backend *b, const char *id, const char *helper, cae_error *err)
{
	int r = helper ? upload_helper(b, id, helper, err) : 0;
	if (r < 0)
		return r;
	r = cae_docker_container_start(impl_of(b)->d, id, err);
	return r < 0 ? cae_error_prefix(err, "start") : 0;
}

/* docker_create's engine steps (in an engine slot): create under the creating name, the
 * helper's upload, start. t_wait: when the wait for the slot began. */
static int create_and_start(cae_prepare *p, int64_t t_wait, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	cae_docker *d = impl_of(p->b)->d;
	json_t *engine_warnings = NULL;
	json_t *config = container_config(p, dp->with_disk);
	if (!config)
		return cae_error_set(err, -ENOMEM, "out of memory");
	char creating[160];
	creating_name(creating, sizeof(creating), p->task->uuid);
	int64_t t_create = cae__now_ms();
	int r = cae_docker_container_create(d, creating, config, &dp->id, &engine_warnings, err);
	json_decref(config);
	if (r < 0 && dp->with_disk && storage_opt_refused(err->message)) {
		char w[CAE_ERROR_MSG_MAX + 64];
		snprintf(w, sizeof(w), "disk limit not applied: %s", err->message);
		cae__prepare_warn(p, "docker.disk_limit_unsupported", w);
		set_disk_limits(p, false, dp->disk_dir != NULL);
		config = container_config(p, false);
		r = cae_docker_container_create(d, creating, config, &dp->id, &engine_warnings,
						err);
		json_decref(config);
	}
	if (r < 0 && dp->disk_dir && strstr(err->message, "bind source path")) {
		/* the engine does not see this host's files (it runs elsewhere, or in a
		 * container of its own): the workspace cannot be bound */
		char w[CAE_ERROR_MSG_MAX + 64];
		snprintf(w, sizeof(w), "disk limit not applied: %s", err->message);
		cae__prepare_warn(p, "docker.disk_limit_unsupported", w);
		(void)cae__diskfs_container_release(dp->disk_dir);
		free(dp->disk_dir);
		dp->disk_dir = NULL;
		set_disk_limits(p, false, false);
		config = container_config(p, false);
		r = cae_docker_container_create(d, creating, config, &dp->id, &engine_warnings,
						err);
		json_decref(config);
	}
	if (r == -ENOENT && strstr(err->message, "No such image"))
		return cae__image_missing_docker(dp->image, p->environment, err);
	if (r < 0)
		return r;
	size_t wi;
	json_t *wv;
	json_array_foreach(engine_warnings, wi, wv)
	{
		if (json_is_string(wv) && *json_string_value(wv) &&
		    cae__engine_warning_first(cae_docker_host(d), json_string_value(wv)))
			cae__prepare_warn(p, "docker.engine_warning", json_string_value(wv));
	}
	json_decref(engine_warnings);
	int64_t t_start = cae__now_ms();
	if ((r = upload_and_start(p->b, dp->id, dp->helper, err)) < 0)
		return r;
	int64_t t_started = cae__now_ms();
	char name[128];
	container_name(name, sizeof(name), p->task->uuid);
	p->create_fields = json_pack(
	    "{s:s, s:s, s:s, s:I, s:I, s:I}", "container", name, "image", dp->image, "network",
	    network_mode(p->b->cfg), "slot_wait_ms", (json_int_t)(t_create - t_wait), "create_ms",
	    (json_int_t)(t_start - t_create), "start_ms", (json_int_t)(t_started - t_start));
	dp->pc = (struct prep_ctx){.b = p->b,
				   .forge = cae__net_forge(p->b->cfg, p->task),
				   .uuid = p->task->uuid,
				   .id = dp->id,
				   .cancel_fd = p->cancel_fd,
				   .has_helper = dp->helper != NULL};
	p->exec = prep_exec;
	p->exec_ctx = &dp->pc;
	p->project = PROJECT;
	return 0;
}

/* The claim of a pool container for p's task (src/backend/pool.c) when its pool's key is
 * the one this prepare's container would have: 1 when claimed (p set up as docker_create
 * would), 0 when none was (a cold create follows). What the pool recorded at its creation
 * (the time, the warnings) becomes the environment's, as the labels say it; the task's own
 * warning (an environment's fallback) is in the prepare's result only. */
static int claim_warm(cae_prepare *p, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	if (!cae__pool_wanted(p->b->cfg, p->environment) ||
	    ends_with(p->task->uuid, CREATING_SUFFIX))
		return 0;
	int64_t t0 = cae__now_ms();
	json_t *body = NULL;
	char key[CAE_POOL_KEY_MAX];
	_cleanup_free_ char *helper = NULL;
	cae_error e = {0};
	if (cae__docker_pool_spec(p->b, p->environment, &body, key, &helper, &e) < 0) {
		cae_log_event(p->b->log, CAE_LOG_WARN, "pool.claim_failed", "%s", e.message);
		return 0;
	}
	json_decref(body);
	char creating[160];
	creating_name(creating, sizeof(creating), p->task->uuid);
	json_t *c = NULL;
	cae_helper_mux *mux = NULL;
	int r = cae__docker_pool_claim(p->b, key, creating, helper ? &mux : NULL, &c, err);
	if (r <= 0)
		return r;
	dp->claimed = true;
	json_t *labels = json_object_get(c, "Labels");
	const char *created = label(labels, LABEL_CREATED);
	const char *wl = label(labels, LABEL_WARNINGS);
	json_t *w = json_loads(wl ? wl : "[]", 0, NULL);
	if (created)
		snprintf(p->created_at, sizeof(p->created_at), "%s", created);
	while (json_array_size(p->warnings) > dp->task_warnings)
		json_array_remove(p->warnings, dp->task_warnings);
	if (json_is_array(w))
		json_array_extend(p->warnings, w);
	json_decref(w);
	dp->id = strdup(json_string_value(json_object_get(c, "Id")));
	json_decref(c);
	if (!dp->id) {
		cae_helper_mux_close(mux);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	char name[128];
	container_name(name, sizeof(name), p->task->uuid);
	p->create_fields = json_pack("{s:s, s:s, s:s, s:b, s:s, s:I}", "container", name, "image",
				     dp->image, "network", network_mode(p->b->cfg), "pool", 1,
				     "pool_key", key, "claim_ms", (json_int_t)(cae__now_ms() - t0));
	dp->pc = (struct prep_ctx){.b = p->b,
				   .forge = cae__net_forge(p->b->cfg, p->task),
				   .uuid = p->task->uuid,
				   .id = dp->id,
				   .cancel_fd = p->cancel_fd,
				   .has_helper = helper != NULL,
				   /* the claim's stream; without one, the first step opens it */
				   .mux = mux,
				   .mux_tried = mux != NULL};
	p->exec = prep_exec;
	p->exec_ctx = &dp->pc;
	p->project = PROJECT;
	cae__backend_pool_wake(p->b);
	return 1;
}

/* Creates and starts the container, under the creating name until the last step (see the
 * top of this file), or claims one from the warm pool. */
/* The workspace's own file system (diskfs.h) before its container is created; where it
 * cannot be made, the container's disk is not bounded and the warnings say so. */
static int disk_make(cae_prepare *p, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	if (!dp->disk_dir)
		return 0;
	cae_error derr = {0};
	int r = cae__diskfs_container_make(
	    dp->disk_dir, p->b->cfg->command_executor.docker.resources.disk_bytes, CONTAINER_UID,
	    CONTAINER_UID, p->cancel_fd, &dp->disk_lock, &derr);
	if (r == -ECANCELED)
		return cae_error_set(err, r, "cancelled");
	if (r < 0) {
		char w[CAE_ERROR_MSG_MAX + 64];
		snprintf(w, sizeof(w), "disk limit not applied: %s", derr.message);
		cae__prepare_warn(p, "docker.disk_limit_unsupported", w);
		(void)cae__diskfs_container_release(dp->disk_dir);
		free(dp->disk_dir);
		dp->disk_dir = NULL;
		set_disk_limits(p, false, false);
	}
	return 0;
}

static int docker_create(cae_prepare *p, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	if (!is_local_repo(p->task->repo))
		dp->git_credential = cae__git_credential_record(p->b->cfg, p->task);
	int warm = claim_warm(p, err);
	if (warm != 0)
		return warm < 0 ? warm : 0;
	int64_t t_wait = cae__now_ms();
	int slot = engine_slot_take(p->b, p->cancel_fd, err);
	if (slot < -1)
		return slot;
	int r = disk_make(p, err);
	if (r == 0)
		r = create_and_start(p, t_wait, err);
	engine_slot_give(slot);
	return r;
}

/* ---- protected paths (command_executor.protected_paths) ----
 *
 * Commands run as the image's user with no capabilities, and the engine may be remote (no
 * host mount to bind read-only), so ownership keeps these paths: each one is made root's
 * (uploaded through the Engine's archive API, which extracts as root and keeps the tar's
 * owners), and every directory on the way to it, from /workspace down, becomes root's with
 * mode 1777: writable by the user, but sticky, so that the user can neither rename nor
 * remove an entry of root's in it (.git itself, the project, the protected path), and so
 * cannot put a writable one in its place. git refuses a repository whose directories are
 * another user's ("dubious ownership") unless safe.directory names it: the user's global
 * configuration gets safe.directory=/workspace/project. An image without GNU tar (which
 * writes the paths' tar with root as owner) gets a warning instead: never pretended. */

/* $1: where the tar's names start: "/" (named workspace/project/..., for the one upload at
 * "/") or "." (relative to the project); then the protected paths. The user's pass
 * (CAE_PROTECT_USER_PASS) names the paths it keeps on stderr (one a line, relative to the
 * project) and writes them to stdout as a tar whose entries are root's. */
/* clang-format off */
static const char protect_script[] =
    "set -euf\n"
    "cd " PROJECT "\n"
    "pre=; [ \"$1\" != / ] || pre=workspace/project/\n"
    "shift\n"
    "tar --help 2>/dev/null | grep -q -- --owner || exit 3\n"
    CAE_PROTECT_USER_PASS(PROJECT,
			  "set -- \"$@\" \"$pre$q\"; printf '%s\\n' \"$q\" >&2",
			  "  shift\n")
    "[ $# -gt 0 ] || exit 0\n"
    "[ -z \"$pre\" ] || cd /\n"
    "exec tar -cf - --owner=0 --group=0 --numeric-owner -- \"$@\"\n";
/* clang-format on */

#define PROTECT_TAR_MAX ((size_t)64 << 20)

struct bytes {
	const char *p;
	size_t n;
};

/* A tar made elsewhere, as it is. */
static int fill_bytes(int fd, void *ud)
{
	const struct bytes *x = ud;
	return cae__write_all(fd, x->p, x->n);
}

/* What the upload at "/" holds: the ancestors of the kept paths (names: their lines, a
 * string; NULL: no protected path kept) and, for a container from the warm pool, the
 * task's record (CAE_POOL_CLAIM_DIR, with its credential target when it has one). */
struct root_upload {
	const char *names;
	bool record;
	const char *credential;
	const char *forge;
	const struct bytes *tail; /* a checked tar (cae__tar_confined) after ours, or NULL */
};

/* One file of the claim's record, root's, with text. */
static int write_record_file(int fd, const char *path, const char *text)
{
	_cleanup_close_ int m = memfd_create("cae-claim", MFD_CLOEXEC);
	size_t n = strlen(text);
	int r;
	if (m < 0)
		return -errno;
	if ((r = cae__write_all(m, text, n)) < 0)
		return r;
	if (lseek(m, 0, SEEK_SET) < 0)
		return -errno;
	return write_tar_entry(fd, &path[1], '0', 0644, 0, "root", m, (uint64_t)n);
}

/* The claim's record, root's: the directory, its credential target and its forge. */
static int write_record(int fd, const struct root_upload *u)
{
	int r = write_tar_entry(fd, &CAE_POOL_CLAIM_DIR[1], '5', 0755, 0, "root", -1, 0);
	if (r == 0 && u->credential)
		r = write_record_file(fd, CAE_POOL_CLAIM_CREDENTIAL, u->credential);
	if (r == 0 && u->forge)
		r = write_record_file(fd, CAE_POOL_CLAIM_FORGE, u->forge);
	return r;
}

/* The directories on the way to each kept path, from /workspace down, as root's with mode
 * 1777, and the claim's record, into the tar fd (names relative to "/"). */
static int write_ancestors(int fd, void *ud)
{
	const struct root_upload *u = ud;
	int r = u->record ? write_record(fd, u) : 0;
	if (!u->names)
		return r == 0 ? write_tar_end(fd) : r;
	const char *names = u->names;
	if (r == 0)
		r = write_tar_entry(fd, "workspace/", '5', 01777, 0, "root", -1, 0);
	if (r == 0)
		r = write_tar_entry(fd, "workspace/project/", '5', 01777, 0, "root", -1, 0);
	for (const char *l = names; r == 0 && *l;) {
		size_t n = strcspn(l, "\n");
		for (size_t i = 0; r == 0 && i < n; i++) {
			if (l[i] != '/')
				continue;
			char name[100];
			if ((size_t)snprintf(name, sizeof(name), "workspace/project/%.*s/", (int)i,
					     l) >= sizeof(name))
				return -EFBIG;
			r = write_tar_entry(fd, name, '5', 01777, 0, "root", -1, 0);
		}
		l += n + (l[n] == '\n');
	}
	if (r == 0 && u->tail && u->tail->n)
		return fill_bytes(fd, (void *)u->tail); /* it ends the archive */
	return r == 0 ? write_tar_end(fd) : r;
}

/* A tar number field as Go's archive/tar reads it (spaces and NULs around octal digits); -1
 * for anything else (base-256 among them). */
static int64_t tar_number(const char *f, size_t w)
{
	size_t a = 0, z = w;
	while (a < z && (f[a] == ' ' || f[a] == '\0'))
		a++;
	while (z > a && (f[z - 1] == ' ' || f[z - 1] == '\0'))
		z--;
	int64_t v = 0;
	for (size_t i = a; i < z; i++) {
		if (f[i] < '0' || f[i] > '7' || v > (INT64_MAX >> 3))
			return -1;
		v = v * 8 + (f[i] - '0');
	}
	return v;
}

bool cae__tar_confined(const char *tar, size_t n, const char *prefix)
{
	static const char zero[TAR_BLOCK];
	size_t plen = strlen(prefix);
	for (size_t off = 0; off <= n && n - off >= TAR_BLOCK;) {
		const char *h = tar + off;
		if (memcmp(h, zero, TAR_BLOCK) == 0)
			return n - off >= 2 * TAR_BLOCK &&
			       memcmp(h + TAR_BLOCK, zero, TAR_BLOCK) == 0;
		bool posix = memcmp(h + 257,
				    "ustar\0"
				    "00",
				    8) == 0;
		bool gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
		/* (star's ustar puts something else where POSIX has the prefix) */
		if ((!posix && !gnu) || (posix && memcmp(h + 508, "tar\0", 4) == 0))
			return false;
		char type = h[156];
		int64_t size = tar_number(h + 124, 12);
		if ((type != '0' && type != '\0' && type != '5') || size < 0 ||
		    (type == '5' && size != 0))
			return false;
		char name[155 + 1 + 100 + 1];
		size_t nl = strnlen(h, 100), pl = posix ? strnlen(h + 345, 155) : 0;
		snprintf(name, sizeof(name), "%.*s%s%.*s", (int)pl, h + 345, pl ? "/" : "", (int)nl,
			 h);
		if (strlen(name) <= plen || strncmp(name, prefix, plen) != 0)
			return false;
		for (const char *c = name; *c;) {
			size_t k = strcspn(c, "/");
			if (k == 2 && c[0] == '.' && c[1] == '.')
				return false;
			c += k + (c[k] == '/');
		}
		uint64_t blocks = ((uint64_t)size + TAR_BLOCK - 1) / TAR_BLOCK;
		if (blocks > (n - off) / TAR_BLOCK)
			return false;
		off += TAR_BLOCK + (size_t)blocks * TAR_BLOCK;
	}
	return false;
}

/* Runs the protected paths' script through the prepare's stream, its tar's names starting
 * at base ("/" or "."; see protect_script). */
static int protect_run(cae_prepare *p, const char *base, cae_run_result *res, cae_error *err)
{
	const cae_config_strlist *pp = &p->b->cfg->command_executor.protected_paths;
	_cleanup_free_ const char **argv = calloc(pp->n + 6, sizeof(char *));
	if (!argv)
		return cae_error_set(err, -ENOMEM, "out of memory");
	size_t k = 0;
	argv[k++] = "sh";
	argv[k++] = "-c";
	argv[k++] = protect_script;
	argv[k++] = "cae-protect";
	argv[k++] = base;
	for (size_t i = 0; i < pp->n; i++)
		argv[k++] = pp->items[i];
	cae_exec_request req = {.argv = argv,
				.cwd = PROJECT,
				.timeout_ms = 300 * 1000,
				.max_stdout = PROTECT_TAR_MAX,
				.max_stderr = 64 * 1024,
				.cancel_fd = -1};
	int r = prep_exec(&prep_of(p)->pc, &req, res, err);
	if (r < 0)
		return cae_error_prefix(err, "protected paths");
	if (res->exit_code != 0 && res->exit_code != 3) {
		char line[512];
		last_line(res, line, sizeof(line));
		r = cae_error_set(
		    err, -EIO, "protected paths: cannot make them read-only to commands: %s", line);
		cae_run_result_clear(res);
		return r;
	}
	if (res->out_len >= PROTECT_TAR_MAX) {
		cae_run_result_clear(res);
		return cae_error_set(err, -EIO,
				     "protected paths: cannot make them read-only to commands: "
				     "larger than 64 MiB");
	}
	return 0;
}

/* The protected paths (and the claim's record, for a container from the warm pool): the
 * script through the prepare's stream, then one archive upload at "/" (an Engine API call
 * of ~45 ms; the engine extracts it as root) holding the record, the directories on the way
 * and the paths themselves, the script's tar checked (cae__tar_confined) to stay beneath
 * the project. A tar that does not pass (a link among the paths, a long name) is made
 * again relative to the project and extracted there, apart: two uploads. */
static int protect_paths(cae_prepare *p, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	const cae_config_strlist *pp = &p->b->cfg->command_executor.protected_paths;
	struct root_upload ru = {
	    .record = dp->claimed, .credential = dp->git_credential, .forge = dp->pc.forge};
	if (!pp->n)
		return ru.record ? put_tar(p->b, dp->id, "/", "the claim's record", write_ancestors,
					   &ru, err)
				 : 0;
	cae_run_result res;
	int r = protect_run(p, "/", &res, err);
	if (r < 0)
		return r;
	if (res.exit_code == 3) {
		/* said in ContainerInfo.warnings and the log: never pretended */
		cae__prepare_warn(
		    p, "docker.protected_paths_unenforced",
		    "command_executor.protected_paths are not read-only to commands in "
		    "this environment: its image has no GNU tar (tar --owner) to give "
		    "them to root");
		cae_run_result_clear(&res);
		return ru.record ? put_tar(p->b, dp->id, "/", "the claim's record", write_ancestors,
					   &ru, err)
				 : 0;
	}
	struct bytes tail = {res.out, res.out_len};
	if (res.out_len && !cae__tar_confined(res.out, res.out_len, "workspace/project/")) {
		cae_run_result_clear(&res);
		r = protect_run(p, ".", &res, err);
		if (r < 0)
			return r;
		if (res.exit_code == 0 && res.out_len)
			r = put_tar(p->b, dp->id, PROJECT, "the protected paths", fill_bytes,
				    &(struct bytes){res.out, res.out_len}, err);
		tail = (struct bytes){NULL, 0};
	} else {
		ru.tail = &tail;
	}
	ru.names = res.err ? res.err : "";
	if (r == 0)
		r = put_tar(p->b, dp->id, "/", "the protected paths", write_ancestors, &ru, err);
	cae_run_result_clear(&res);
	return r < 0 ? cae_error_prefix(err, "protected paths") : 0;
}

static int docker_clone(cae_prepare *p, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	const cae_config *cfg = p->b->cfg;
	/* a container without a network clones nothing from a remote, cached or not */
	bool offline = !cae__net_full(cfg, "docker");
	if (!is_local_repo(p->task->repo) && offline)
		return cae__git_clone(prep_exec, &dp->pc, cfg, p->b->log, p->task, PROJECT, err);
	if (!is_local_repo(p->task->repo))
		return cae__git_clone_cached(prep_exec, &dp->pc, cfg, p->b->log, p->task, PROJECT,
					     ship_mirror, &dp->pc, p->cancel_fd, err);
	int r = upload_local_repo(p->b, &dp->pc, p->task->repo, err);
	if (r < 0)
		return r;
	cae_task local = *p->task;
	local.repo = (char *)"file://" SOURCE_MIRROR;
	return cae__git_clone(prep_exec, &dp->pc, p->b->cfg, p->b->log, &local, PROJECT, err);
}

/* Step 5b: Go's shared build cache copied in when the project is Go's (pkgcache-docker.c),
 * cae's fills of the shared Go modules and pip wheels (pkgcache-gomod.c, pkgcache-pip.c),
 * Maven's settings and its fill after the install (pkgcache-maven.c); a failure costs a
 * cold cache, with a warning. */
static void docker_go_cache(cae_prepare *p)
{
	if (!p->b->cfg->command_executor.package_cache.enabled || !impl_of(p->b)->socket_path)
		return;
	cae_error e;
	cae_error_clear(&e);
	if (cae__pkgcache_go_docker_seed(p, impl_of(p->b)->d, prep_of(p)->id, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Go build cache is not used: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	/* Maven: the settings that name the shared repository */
	if (cae__pkgcache_maven_docker(p, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Maven repository is not used: %.1100s",
			 e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	/* cae's fills act for the task: only for a container that has the network itself (a
	 * Go proxy fetches the module paths a go.mod names from their own hosts; Maven's fill
	 * the paths the container's local repository names) */
	if (!cae__net_full(p->b->cfg, "docker"))
		return;
	p->deps_opts.maven_installed = cae__pkgcache_maven_installed;
	p->deps_opts.maven_installed_ctx = p;
	/* cae's fill of the shared Go modules, from the clone's go.mod and go.sum */
	if (cae__pkgcache_gomod_docker(p, impl_of(p->b)->d, prep_of(p)->id, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Go module cache is not filled: %.1100s",
			 e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	if (cae__pkgcache_pip_docker(p, impl_of(p->b)->d, prep_of(p)->id, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared pip wheels are not filled: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
}

/* After the prepare's `npm ci` (nothing else of the task's ran in the container): its
 * node_modules kept as the shared tree of its lock file, when it may be (pkgcache.h). */
static void docker_npm_keep(void *ctx)
{
	cae_prepare *p = ctx;
	cae_error e;
	cae_error_clear(&e);
	(void)cae__pkgcache_npm_docker_store(p, impl_of(p->b)->d, prep_of(p)->id, &e);
}

/* Step 5c: the shared node_modules tree of the project's lock file put in place of its
 * `npm ci` when there is one, else the tree kept after it (pkgcache-npm-docker.c). */
static void docker_npm_tree(cae_prepare *p)
{
	cae_error e;
	cae_error_clear(&e);
	int r = cae__pkgcache_npm_docker_put(p, impl_of(p->b)->d, prep_of(p)->id, CONTAINER_UID,
					     CONTAINER_UID, &e);
	if (r < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared node_modules is not used: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	if (r == 0 && p->deps_opts.npm_cache_shared) {
		p->deps_opts.npm_installed = docker_npm_keep;
		p->deps_opts.npm_installed_ctx = p;
	}
}

static int docker_populate(cae_prepare *p, cae_error *err)
{
	int r = docker_clone(p, err);
	if (r == 0) {
		docker_go_cache(p);
		docker_npm_tree(p);
	}
	return r;
}

/* Step 6: the text editor is served by the in-container helper once it lands; nothing to
 * start yet. */

/* Step 7: the final name says the environment is ready. */
static int docker_ready(cae_prepare *p, cae_env_info *info, cae_error *err)
{
	struct docker_prep *dp = prep_of(p);
	char name[128];
	container_name(name, sizeof(name), p->task->uuid);
	int r = protect_paths(p, err);
	if (r < 0)
		return r;
	r = cae_docker_container_rename(impl_of(p->b)->d, dp->id, name, err);
	if (r < 0)
		return r;
	return cae__env_ready_info(p, dp->id, info, err);
}

static void docker_release(cae_prepare *p)
{
	struct docker_prep *dp = prep_of(p);
	if (dp) {
		cae_helper_mux_close(dp->pc.mux);
		cae_net_proxy_free(dp->pc.px);
		free(dp->pc.forge);
		if (dp->disk_lock >= 0)
			close(dp->disk_lock);
		free(dp->disk_dir);
		free(dp->id);
		free(dp->helper);
		free(dp->git_credential);
		free(dp);
		p->state = NULL;
	}
}

/* ---- info, list, stale GC ---- */

static int docker_info(cae_backend *b, const char *uuid, cae_env_info *info, cae_error *err)
{
	char name[160];
	container_name(name, sizeof(name), uuid);
	json_t *c = NULL;
	cae_error e = {0};
	int r = cae_docker_container_inspect(impl_of(b)->d, name, &c, &e);
	if (r == -ENOENT) {
		/* an unfinished one: reported as creating or failed */
		creating_name(name, sizeof(name), uuid);
		r = cae_docker_container_inspect(impl_of(b)->d, name, &c, &e);
	}
	if (r == -ENOENT)
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	if (r < 0)
		return cae_error_set(err, r, "%s", e.message);
	r = cae__env_info(b, &envs_ops, c, info, err);
	json_decref(c);
	return r;
}

/* The containers named with our prefix (cae_envs_ops.list; GET /containers/json filters
 * match names by substring: container_phase checks again). */
static int list_containers(cae_backend *b, json_t **out, cae_error *err)
{
	json_t *filters = json_pack("{s:[s]}", "name", NAME_PREFIX);
	int r = cae_docker_container_list(impl_of(b)->d, true, filters, out, err);
	json_decref(filters);
	return r;
}

/* What a running environment uses and may use (cae_docker_stats_summary), from the
 * engine's stats endpoint; NULL for one that is not running or when the engine does not
 * answer. */
static json_t *resources_of(cae_backend *b, json_t *c)
{
	const char *id = json_string_value(json_object_get(c, "Id"));
	const char *state = json_string_value(json_object_get(c, "State"));
	if (!id || !state || strcmp(state, "running") != 0)
		return NULL;
	cae_docker *d = impl_of(b)->d;
	json_t *stats = NULL, *ic = NULL;
	if (cae_docker_container_stats(d, id, &stats, NULL) < 0)
		return NULL;
	(void)cae_docker_container_inspect(d, id, &ic, NULL);
	json_t *res = cae_docker_stats_summary(stats, ic);
	json_decref(stats);
	json_decref(ic);
	return res;
}

/* A container's entry of the list gets its resources (cae_envs_ops.extra). */
static void add_resources(cae_backend *b, json_t *c, json_t *entry)
{
	json_t *res = entry ? resources_of(b, c) : NULL;
	if (res)
		json_object_set_new(entry, "resources", res);
}

static int docker_list(cae_backend *b, json_t **out, cae_error *err)
{
	return cae__envs_list(b, &envs_ops, out, err);
}

/* A finished environment that can run no command any more (cae_envs_ops.gone): its
 * container stopped and will not be started again (only one its helper stopped after the
 * helper's lifetime is; see restart_expired), or the engine gave up on it. One old enough
 * to go anyway is not looked at. */
static bool container_gone(cae_backend *b, json_t *c, bool old)
{
	if (old)
		return false;
	const char *state = json_string_value(json_object_get(c, "State"));
	if (!state || strcmp(state, "running") == 0 || strcmp(state, "restarting") == 0 ||
	    strcmp(state, "created") == 0 || strcmp(state, "paused") == 0)
		return false;
	if (strcmp(state, "dead") == 0)
		return true;
	if (strcmp(state, "exited") != 0)
		return false;
	const char *id = json_string_value(json_object_get(c, "Id"));
	json_t *ic = NULL;
	if (!id || cae_docker_container_inspect(impl_of(b)->d, id, &ic, NULL) < 0)
		return false;
	json_t *st = json_object_get(ic, "State");
	bool expired =
	    json_integer_value(json_object_get(st, "ExitCode")) == CAE_HELPER_INIT_EXPIRED &&
	    label(json_object_get(json_object_get(ic, "Config"), "Labels"), LABEL_HELPER);
	bool gone = !json_is_true(json_object_get(st, "Running")) && !expired;
	json_decref(ic);
	return gone;
}

/* The gc's removal (cae_envs_ops.remove): the container, given its stop timeout. */
static int remove_stale(cae_backend *b, const char *uuid, cae_error *err)
{
	return remove_env(b, uuid, STOP_TIMEOUT_S, err);
}

static const cae_envs_ops envs_ops = {
    .list = list_containers,
    .record = container_record,
    .extra = add_resources,
    .gone = container_gone,
    .remove = remove_stale,
    .project = PROJECT,
    .what = "container",
};

/* Whether uuid has no container, finished or unfinished (a workspace's file system left by
 * a prepare that died before its container was made). */
static bool no_container(const char *uuid, void *ud)
{
	cae_backend *b = ud;
	char name[160];
	json_t *c = NULL;
	container_name(name, sizeof(name), uuid);
	int r = cae_docker_container_inspect(impl_of(b)->d, name, &c, NULL);
	json_decref(c);
	if (r != -ENOENT)
		return false;
	c = NULL;
	creating_name(name, sizeof(name), uuid);
	r = cae_docker_container_inspect(impl_of(b)->d, name, &c, NULL);
	json_decref(c);
	return r == -ENOENT;
}

/* Whether a handover directory's container is gone (pool@NAME: a pool container's). */
static bool net_dir_gone(const char *name, void *ud)
{
	cae_backend *b = ud;
	if (strncmp(name, "pool@", 5) != 0)
		return cae_task_uuid_valid(name) && no_container(name, b);
	json_t *c = NULL;
	int r = cae_docker_container_inspect(impl_of(b)->d, name + 5, &c, NULL);
	json_decref(c);
	return r == -ENOENT;
}

static int docker_cleanup_stale(cae_backend *b, int64_t threshold_s, cae_env_filter_fn filter,
				void *filter_ud, int *removed, cae_error *err)
{
	int r = cae__envs_cleanup_stale(b, &envs_ops, threshold_s, filter, filter_ud, removed, err);
	if (b->cfg->command_executor.state_dir) {
		(void)cae__diskfs_container_sweep(b->cfg->command_executor.state_dir, no_container,
						  b);
		(void)cae__net_handover_sweep(b->cfg->command_executor.state_dir, net_dir_gone, b);
		(void)cae__snapshot_sweep(b, NULL); /* killed snapshots' and forks' leftovers */
	}
	return r;
}

/* ---- what the warm pool (src/backend/pool.c) borrows ---- */

cae_docker *cae__docker_client(cae_backend *b)
{
	return impl_of(b)->d;
}

int cae__docker_pool_spec(cae_backend *b, const char *environment, json_t **body,
			  char key[CAE_POOL_KEY_MAX], char **helper, cae_error *err)
{
	cae_backend quiet;
	cae_task task;
	cae_prepare p;
	*body = NULL;
	*helper = NULL;
	int r = cae__pool_prepare_init(&p, &quiet, b, &task, environment, err);
	if (r == 0)
		r = docker_validate(&p, err);
	struct docker_prep *dp = prep_of(&p);
	if (r == 0 && !(*body = container_config(&p, dp->with_disk)))
		r = cae_error_set(err, -ENOMEM, "out of memory");
	if (r == 0) {
		/* what is the task's is not the pool's */
		json_t *labels = json_object_get(*body, "Labels");
		json_object_del(labels, LABEL_UUID);
		json_object_del(labels, LABEL_CREATED);
		json_object_del(labels, LABEL_PREPARER);
		json_object_del(labels, LABEL_GIT_CREDENTIAL);
		/* the helper uploaded is part of the container too; the warnings are not (an
		 * engine-wide one is said once per process: the fill's spec has it, the status's
		 * and the claim's not, which gave the same container two keys) */
		json_t *keyed = json_deep_copy(*body);
		json_object_del(json_object_get(keyed, "Labels"), LABEL_WARNINGS);
		if (!keyed || cae__pool_key(b, keyed, dp->helper, key) < 0)
			r = cae_error_set(err, -ENOMEM, "out of memory");
		json_decref(keyed);
		*helper = TAKE_PTR(dp->helper);
	}
	if (r < 0) {
		json_decref(*body);
		*body = NULL;
		free(*helper);
		*helper = NULL;
	}
	docker_release(&p);
	json_decref(p.warnings);
	json_decref(p.limits);
	return r;
}

int cae__docker_create_started(cae_backend *b, const char *name, json_t *body, const char *helper,
			       int cancel_fd, char **id, cae_error *err)
{
	int slot = engine_slot_take(b, cancel_fd, err);
	if (slot < -1)
		return slot;
	*id = NULL;
	int r = cae_docker_container_create(impl_of(b)->d, name, body, id, NULL, err);
	if (r == 0 && (r = upload_and_start(b, *id, helper, err)) < 0) {
		(void)cae_docker_container_remove(impl_of(b)->d, *id, true, true, NULL);
		free(*id);
		*id = NULL;
	}
	engine_slot_give(slot);
	return r;
}

int cae__docker_remove(cae_backend *b, const char *id, cae_error *err)
{
	return remove_container(b, id, id, -1, err);
}

void cae__docker_forget(cae_backend *b, const char *uuid)
{
	cae__chan_forget(&impl_of(b)->chans, uuid);
}

/* ---- life ---- */

static void docker_free(cae_backend *b)
{
	struct docker_impl *di = b ? impl_of(b) : NULL;
	cae__diskfs_settle(); /* what its restores let go of */
	if (di) {
		cae__chan_table_fini(&di->chans);
		cae_docker_free(di->d);
		pthread_mutex_destroy(&di->lock);
		free(di->socket_path);
		free(di->slots_dir);
		free(di);
	}
	free(b);
}

static const cae_backend_ops docker_ops = {
    .name = "docker",
    .validate = docker_validate,
    .remove = docker_remove,
    .create = docker_create,
    .populate = docker_populate,
    .ready = docker_ready,
    .release = docker_release,
    .exec = docker_exec,
    .edit = docker_edit,
    .fs = docker_fs,
    .network_denied = docker_network_denied,
    .port_forward = docker_port_forward,
    .cleanup_stale = docker_cleanup_stale,
    .list = docker_list,
    .info = docker_info,
    .free = docker_free,
};

int cae__docker_backend_new(const cae_config *cfg, cae_log *log, cae_backend **out, cae_error *err)
{
	cae_backend *b = calloc(1, sizeof(*b));
	struct docker_impl *di = calloc(1, sizeof(*di));
	if (!b || !di) {
		free(b);
		free(di);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&di->lock, NULL);
	cae__chan_table_init(&di->chans, b, &chan_ops);
	b->ops = &docker_ops;
	b->cfg = cfg;
	b->log = log;
	b->impl = di;
	const char *host = cfg->command_executor.docker_host;
	int r = cae_docker_new(host, &di->d, err);
	if (r < 0) {
		docker_free(b);
		return r;
	}
	const char *state = cfg->command_executor.state_dir;
	if (state && state[0] == '/')
		di->slots_dir = cae__path_join(state, "engine-slots");
	const char *h = cae_docker_host(di->d);
	if (strncmp(h, "unix://", 7) == 0)
		di->socket_path = strdup(h + 7);
	r = cae_docker_ping(di->d, CONNECT_TIMEOUT_MS, err);
	if (r < 0) {
		cae_error_prefix(err, "docker backend");
		docker_free(b);
		return r;
	}
	const char *v = cae_docker_api_version(di->d, NULL);
	cae_log_fields(log, CAE_LOG_INFO, "docker.connected",
		       json_pack("{s:s, s:s}", "host", h, "api_version", v ? v : "?"), NULL);
	*out = b;
	return 0;
}

bool cae__docker_backend_available(const cae_config *cfg)
{
	cae_docker *d = NULL;
	if (cae_docker_new(cfg->command_executor.docker_host, &d, NULL) < 0)
		return false;
	bool ok = cae_docker_ping(d, AVAILABLE_TIMEOUT_MS, NULL) == 0;
	cae_docker_free(d);
	return ok;
}
