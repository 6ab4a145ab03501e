/* Internal to src/backend: the shared package caches (command_executor.package_cache), one
 * per host, cae instance and owner (the uid that writes it: the local sandbox's, a
 * container's user), that the environments of that instance read and fill:
 *   <state_dir>/package-cache/<instance key>/<owner>/.used   mtime: its last prepare
 *   <state_dir>/package-cache/<instance key>/<owner>/npm     npm's cache (cacache)
 * Commands see each tool's cache under CAE_PKGCACHE_INSIDE (kubernetes: the read-only ones
 * served over HTTP instead, pkgcache-serve.c below) and are pointed at it by the
 * variables of cae__pkgcache_env (npm), cae__pkgcache_gomod_env (Go modules) and
 * cae__pkgcache_pip_env (pip's wheels), and by cae's settings.xml (Maven's artifacts). What
 * protects each one: npm's, its own checks; every other one, being read-only to every task
 * and written by cae alone, from no task's code or configuration; Go's modules besides,
 * go.sum (or GOSUMDB) checked on extraction; pip's wheels, only the project's own hashes
 * where it pins them; Maven's artifacts, the remote's checksums checked by the fill (a task
 * names which files, never their bytes).
 *
 * Only caches whose tool verifies what it reads are shared read-write. npm's is: cacache
 * stores content by its sha512 and checks it on every read, and `npm ci` checks every tarball
 * against the lock file's integrity; packument metadata, which no lock file pins, is
 * revalidated with the registry on every use (npm_config_prefer_online). Not shared (each
 * environment keeps its own, as without the cache), because what another task wrote would be
 * used unchecked:
 *   pip      its HTTP cache holds the index pages that say which files and which hashes
 *            pip trusts; a page is revalidated (max-age=0) but a 304 reuses the cached body,
 *            which nothing checks; wheels it built from sdists are reused by name, unchecked
 *            (hashes are checked only with --require-hashes, and of downloads only).
 *            Downloaded wheels are shared read-only instead, in a directory that cae alone
 *            fills from the operator's index (below).
 *   Maven    the local repository: checksums are compared on download (a mismatch only
 *            warns by default), never when an artifact is read from the local repository;
 *            and cae cannot fill it by running Maven itself, since resolving a pom.xml runs
 *            the plugins and build extensions it names (code), where go and pip download.
 *            Release artifacts are shared read-only instead, in a Maven-layout repository
 *            that cae alone fills with libcurl from the operator's remote, taking from an
 *            environment only the names of what its Maven resolved (below).
 *   Go mods  (read-write) go.sum pins each module's zip and go.mod hash, checked when a
 *            module is downloaded into the cache; builds read the extracted tree of
 *            GOMODCACHE/<module>@<version>, which is not hashed again (`go mod verify`
 *            does, on demand). Shared read-only instead, as a module proxy that cae alone
 *            fills (below): each environment's GOMODCACHE stays its own, and go checks what
 *            it takes from the proxy against go.sum as it checks a download.
 *
 * An installed node_modules is checked by nothing either: the trees below are shared
 * read-only, kept by cae from an npm ci that ran no code (local: linked into the next
 * environment; docker: copied into the next container by the engine, the copy its own;
 * kubernetes: extracted in the next pod by its tar, as its user, the copy its own).
 *
 * Go's build cache checks an entry's size, not its content, so it is shared read-only: no
 * task writes what another reads. The shared one,
 *   <state_dir>/package-cache/<instance key>/go/build   GOCACHE of the fill, cae's files
 * is filled by cae alone, once per Go toolchain (go/.filled), on the host, with a package of
 * its own that imports the whole standard library (`go test` of it: the compile, cgo and vet
 * outputs a project's `go test` takes of the standard library), no task's code or
 * configuration (GOENV off, an empty HOME, the sandbox's PATH); an environment's GOCACHE is
 * a copy of it made of hard links to those files, sealed read-only (0444, cae's uid: a
 * sandbox uid other than cae's can neither write nor chmod them), in directories it owns:
 * its own builds add to and remove from its copy only. */
#ifndef CAE_BACKEND_PKGCACHE_H
#define CAE_BACKEND_PKGCACHE_H

#include "cae/config.h"
#include "cae/error.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CAE_PKGCACHE_INSIDE "/cache"
#define CAE_PKGCACHE_NPM CAE_PKGCACHE_INSIDE "/npm"

/* owner's npm cache directory on this host into out: made (the owner directory root's 0755,
 * npm given to uid:gid, 0700) when make is set, and its last use recorded; without make,
 * only when it exists. 1: out is set; 0: caches are off (or, without make, it is not there);
 * -errno with err set when it cannot be made. */
int cae__pkgcache_npm_dir(const cae_config *cfg, const char *owner, uid_t uid, gid_t gid, bool make,
			  char *out, size_t size, cae_error *err);

/* Go's build cache for an environment at dest (made; its directories given to uid:gid): a
 * copy of the shared one (filled first when this Go toolchain has not filled it), hard
 * links to its read-only files, or copies of them when copy is set (the sandbox runs as
 * cae's own uid, which could write through a link) or dest is on another file system.
 * 1: made; 0: caches off or no `go` on the sandbox's PATH; -errno with err set. */
int cae__pkgcache_go(const cae_config *cfg, const char *dest, uid_t uid, gid_t gid, bool copy,
		     cae_error *err);

/* Docker (pkgcache-docker.c): Go's build cache of each Go image, filled by cae alone in a
 * container of its own (no network, no task's code, the fill package above) into
 *   <state_dir>/package-cache/<instance key>/go-docker/<image id>/build
 * sealed like the local one (files 0444, directories 0755, cae's uid) and bound read-only
 * into every container of the instance at CAE_PKGCACHE_GO_DOCKER; a container whose project
 * has a go.mod gets a copy of its image's in its own GOCACHE before its first command (cp
 * as the container's user: the copy is its own, the source stays read-only twice over). */
#define CAE_PKGCACHE_GO_DOCKER CAE_PKGCACHE_INSIDE "/go"

/* The directory bound at CAE_PKGCACHE_GO_DOCKER (made, cae's, 0755) into out. 1: set; 0:
 * caches off; -errno with err set. */
int cae__pkgcache_go_docker_dir(const cae_config *cfg, char *out, size_t size, cae_error *err);

/* In the container being prepared (p: docker's prepare, exec its commands as the container's
 * user): when the project has a go.mod and the image has go, fills image's shared build
 * cache if this image has not (a container of cae's, under a lock), then copies it into the
 * container's GOCACHE. 1: seeded; 0: nothing to do; -errno with err set. */
struct cae_prepare;
struct cae_docker;
/* Where the environment being prepared keeps Go's build cache (`go env GOCACHE` as its
 * user, asked from /, out of the project) into *gocache (new), when the project has a
 * go.mod and the image has go. 1: set; 0: not a Go project or no go; -errno with err set. */
int cae__pkgcache_go_probe(struct cae_prepare *p, char **gocache, cae_error *err);
int cae__pkgcache_go_docker_seed(struct cae_prepare *p, struct cae_docker *d, const char *image,
				 cae_error *err);

/* The fill of docker's and kubernetes' (sh -c, as the image's user, with an empty HOME, GOENV
 * and GOWORK off, GOFLAGS empty, GOPROXY off, GOCACHE at CAE_PKGCACHE_GO_FILL_INSIDE/build):
 * in CAE_PKGCACHE_GO_FILL_INSIDE, a package that imports every importable standard package,
 * and the `go test` whose compile, cgo and vet outputs a project's go test takes of the
 * standard library (the local fill's). */
#define CAE_PKGCACHE_GO_FILL_INSIDE "/fill"
extern const char cae__pkgcache_go_fill_script[];

/* Kubernetes (pkgcache-go-kubernetes.c): Go's build cache of each Go image, filled by cae
 * alone in a pod of its own and kept on this host as the tar that pod's tar wrote, never
 * extracted here:
 *   <state_dir>/package-cache/<instance key>/go-kubernetes/<image digest>.tar   0444, cae's
 * A pod whose project has a go.mod gets it extracted into its own GOCACHE, as its user,
 * before any of the task's commands (the tar sent on an exec's stdin: the copy is the
 * pod's, the store is on this host, which no pod writes). Why a pod of cae's and not the
 * task's or this host's go: in the file's header. */

/* After the pod's clone (p: kubernetes' prepare): when the project has a go.mod and the
 * image has go, fills the shared build cache of the pod's image if it is not there (a
 * pod of cae's, under a lock), then extracts it into the pod's GOCACHE. A failure is a
 * warning of p (a cold cache). */
void cae__pkgcache_go_pod(struct cae_prepare *p);
/* The same, its outcome: 1 seeded; 0 nothing to do (caches off, no go.mod, no go);
 * -errno with err set. */
int cae__pkgcache_go_pod_seed(struct cae_prepare *p, cae_error *err);

/* dir's tree given to cae's uid and sealed: files 0444, directories 0755 (no other kind
 * kept). */
int cae__pkgcache_seal(const char *dir);

/* node_modules trees (pkgcache-npm.c), local backend: a project whose `npm ci` runs no code
 * (no install script in package.json or in any locked package, every package a tarball of
 * the npm registry pinned by its sha512, no workspace, link or bundle, no .npmrc,
 * shrinkwrap, pnpm or yarn lock file, no node_modules in the repository) has its
 * node_modules kept after its first successful `npm ci`, copied by cae into
 *   <state_dir>/package-cache/<instance key>/npm-trees/<FNV-1a of the key>/{key,node_modules}
 * (files 0444 or 0555, cae's uid; key: node's and npm's programs, package.json and the lock
 * file, compared byte for byte before use). A new environment of the same key gets the tree
 * as directories of its own holding hard links to those files (copies when copy is set) in
 * place of its `npm ci`: what npm ci would have made, without running it.
 * store: 1 kept; 0 not eligible or already there; -errno. link: 1 put in place (the
 * project's node_modules); 0 none for this key; -errno (nothing left in the project). */
int cae__pkgcache_npm_tree_store(const cae_config *cfg, const char *project, cae_error *err);
int cae__pkgcache_npm_tree_link(const cae_config *cfg, const char *project, uid_t uid, gid_t gid,
				bool copy, cae_error *err);

/* Docker (pkgcache-npm-docker.c): the same trees, keyed by the image (its id) in place of
 * the host's programs, read and written through the engine's archive API. Store: after
 * the prepare's `npm ci` (nothing else of the task's ran in the container), the
 * container's node_modules (GET /containers/{id}/archive, a tar of the engine's) is
 * extracted by cae into the store, every entry beneath node_modules, opened without
 * following a link, only directories, regular files and npm's bin links, bounded like the
 * local walk (files, depth) and in bytes. Put: in a new container of the same key, a tar
 * cae makes of the tree (files 0644 or 0755, everything the container's user's) is
 * extracted by the engine inside the container (PUT /containers/{id}/archive at the
 * project, which has no node_modules: checked as the container's user just before) in
 * place of its `npm ci`. store: 1 kept; 0 not eligible or already there; -errno. put: 1
 * in place (p->deps_opts says so); 0 none for this key; -errno with err set (what was put
 * removed). */
int cae__pkgcache_npm_docker_store(struct cae_prepare *p, struct cae_docker *d,
				   const char *container, cae_error *err);
int cae__pkgcache_npm_docker_put(struct cae_prepare *p, struct cae_docker *d, const char *container,
				 uid_t uid, gid_t gid, cae_error *err);
/* The store's extraction: the engine's tar in fd (read from its start) into root (a new
 * tree's node_modules, borrowed). 0; -EPERM for an entry a tree may not have (outside
 * node_modules, "..", a link other than a bin link, a hard link, a device, ...), -ELOOP or
 * -ENOTDIR for one beneath a link, -EEXIST for one given twice, -EFBIG past the bounds,
 * -EPROTO for what is not a tar: nothing is then made outside root. */
int cae__pkgcache_npm_extract(int fd, int root);
/* Shared by docker's and kubernetes' (pkgcache-npm-docker.c): the tree's key (above) for
 * the project of the environment being prepared, read with p->exec as its user before any
 * of the task's commands (head: what runs npm there; installed: after the `npm ci`, whose
 * node_modules must be a directory, not a link; before it, no node_modules at all), *key
 * NULL when it may have none; an unnamed file for an archive in trees; the tar cae makes
 * of trees/name/node_modules into fd (files 0644 or 0755, every entry uid:gid's); the
 * project's node_modules removed with p->exec (a put that failed). The store's tar, at
 * most CAE_PKGCACHE_NPM_ARCHIVE_MAX bytes. */
#define CAE_PKGCACHE_NPM_ARCHIVE_MAX (4ull << 30)
int cae__pkgcache_npm_exec_key(struct cae_prepare *p, const char *head, bool installed, char **key,
			       size_t *len, char name[17], cae_error *err);
int cae__pkgcache_npm_archive_file(const char *trees, cae_error *err);
int cae__pkgcache_npm_pack(const char *trees, const char *name, int fd, uid_t uid, gid_t gid);
void cae__pkgcache_npm_exec_remove(struct cae_prepare *p);

/* Kubernetes (pkgcache-npm-kubernetes.c): the same trees, keyed by the pod's image (the
 * imageID of its main container's status) in place of the host's programs, read and
 * written over API server execs into the main container, as the pod's user (the snapshots'
 * tar stream, snapshot-kubernetes.c). Store: after the prepare's `npm ci` (nothing else of
 * the task's ran in the pod), `tar -cf - node_modules` of the image's tar at the project
 * (GNU tar's format, or another's: untrusted all the same) streamed to this host, at most
 * CAE_PKGCACHE_NPM_ARCHIVE_MAX bytes, and extracted by cae__pkgcache_npm_extract into the
 * store. Put: in a new pod of the same key, the tar cae makes of the tree (above) sent on
 * the stdin of an exec that checks, as the pod's user, that the project has no
 * node_modules just before it extracts it there (`head -c SIZE | tar -x`), in place of
 * its `npm ci`; a put that fails removes what it put, and `npm ci` runs. cae__pkgcache_npm_k8s
 * is the prepare's step (after the clone): the put, else, when the lock file may have a
 * tree, the store after `npm ci` (p->deps_opts.npm_installed); a failure is a warning of p.
 * cae__pkgcache_npm_k8s_take: the tar of dir's node_modules in pod's main container
 * extracted into root (a new tree's node_modules): 0, or -errno with err set. */
struct cae_backend;
void cae__pkgcache_npm_k8s(struct cae_prepare *p);
int cae__pkgcache_npm_k8s_take(struct cae_backend *b, const char *pod, const char *dir, int root,
			       int cancel_fd, cae_error *err);

/* Shared by both (pkgcache-npm.c): a tree's key made of head (what runs npm) and the
 * package.json and lock file's bytes, with its name (new; NULL when the lock file's
 * `npm ci` may run code); the trees' directory (made); whether trees/name is the tree of
 * key; a new tree's directory of its own (tmp: the key, an empty node_modules; 0 when one
 * is there already or another store of it runs, in any process: *lock holds its store
 * lock, trees/.lock-<name>, and the temporaries of that name's stores that died are
 * removed first) and its publication (r: how its filling went; tmp removed, lock closed;
 * a store killed at any point leaves a temporary the next store of it removes); the mark
 * of the trees' last use; npm's bin links, the only links of a tree (in a .bin directory,
 * "../" then a path that goes up no further). */
#define CAE_PKGCACHE_NPM_FILES_MAX 500000
#define CAE_PKGCACHE_NPM_DEPTH_MAX 64
char *cae__pkgcache_npm_key(const char *head, const char *pkg, size_t pl, const char *lock,
			    size_t ll, size_t *len, char name[17]);
int cae__pkgcache_npm_trees_dir(const cae_config *cfg, char *out, size_t size, cae_error *err);
bool cae__pkgcache_npm_tree_is(const char *trees, const char *name, const char *key, size_t klen);
int cae__pkgcache_npm_tree_begin(const char *trees, const char *name, const char *key, size_t klen,
				 char *tmp, size_t size, int *lock, cae_error *err);
int cae__pkgcache_npm_tree_end(const char *trees, const char *name, const char *tmp, int r,
			       int lock);
void cae__pkgcache_npm_used(const char *trees);
bool cae__pkgcache_npm_bin_link(const char *dir_name, const char *target);

/* Go modules (pkgcache-gomod.c): a module proxy on disk,
 *   <state_dir>/package-cache/<instance key>/go-mod/<module>/@v/<version>.{info,mod,zip}
 * files 0444, directories 0755, cae's; bound read-only at CAE_PKGCACHE_GO_MOD (local's
 * sandbox, every container of the instance) and put first on commands' GOPROXY
 * (cae__pkgcache_gomod_env): go extracts from it into the environment's own GOMODCACHE and
 * checks each zip and go.mod against the project's go.sum (or the checksum database), as it
 * checks a download; what it lacks (a 404 of a file proxy) comes from the operator's proxy.
 * cae alone fills it, before the prepare's `go mod download`, once per go.mod and go.sum,
 * for an environment that has the network itself (cae__net_full; the caller's test):
 * `go mod download` of copies of those two files in a directory of its own
 * (<instance key>/go-mod-fill, 0700), with the host's go (docker, without one: the image's
 * go in a container of cae's, cae__pkgcache_gomod_docker), an empty HOME, GOENV and GOWORK
 * off, GOTOOLCHAIN=local, GOFLAGS=-mod=mod, and the operator's GOPROXY, GOSUMDB, GONOSUMDB,
 * GOPRIVATE, GONOPROXY, GOINSECURE and proxy variables from cae's own environment, never
 * the task's (a download runs no code), and GOVCS=*:off (proxies only). The versions it downloaded
 * and checked are then published: each file copied under a temporary name, sealed, and linked into
 * place unless one is there (a version's files never change). The `list` of versions is not
 * published: @latest is the operator's proxy's answer, never this cache's. */
#define CAE_PKGCACHE_GO_MOD CAE_PKGCACHE_INSIDE "/go-mod"

/* The shared module proxy's directory into out (made, cae's, 0755, when make is set). 1:
 * set; 0: caches off (or, without make, not there); -errno with err set. */
int cae__pkgcache_gomod_dir(const cae_config *cfg, bool make, char *out, size_t size,
			    cae_error *err);

/* "GOPROXY=file://CAE_PKGCACHE_GO_MOD,<cae's GOPROXY, or Go's default>" (static). */
const char *cae__pkgcache_gomod_env(void);

/* The fill for go.mod's text and go.sum's (NULL: none). 1: filled; 0: caches off, no go on
 * the host, or already done for these files; -errno with err set (what was downloaded is
 * published all the same). */
int cae__pkgcache_gomod_fill(const cae_config *cfg, const char *gomod, const char *gosum,
			     cae_error *err);
/* The fill for the go.mod and go.sum of project on this host (regular files, not links). */
int cae__pkgcache_gomod_fill_project(const cae_config *cfg, const char *project, cae_error *err);
/* The fill for the go.mod and go.sum of the container being prepared (p, read with its
 * exec before any of the task's commands ran there; container: its id on d): with the
 * host's go, or, without one (or with cae__pkgcache_gomod_in_container set, for the
 * tests), with the image's go in a container of cae's (the image's user, the host's
 * network, no capabilities, the fill's directory and the shared tree, read-only, bound). */
int cae__pkgcache_gomod_docker(struct cae_prepare *p, struct cae_docker *d, const char *container,
			       cae_error *err);
extern bool cae__pkgcache_gomod_in_container;
/* The fill for the go.mod and go.sum of the pod being prepared (kubernetes): with the
 * host's go only (0 without one). */
int cae__pkgcache_gomod_pod(struct cae_prepare *p, cae_error *err);

/* pip's wheels (pkgcache-pip.c): a flat directory of wheels,
 *   <state_dir>/package-cache/<instance key>/pip-wheels/<name>-<version>-<tags>.whl
 * files 0444, cae's; bound read-only at CAE_PKGCACHE_PIP_WHEELS (local's sandbox, every
 * container) and named by PIP_FIND_LINKS (cae__pkgcache_pip_env), the index still the
 * configured one (PIP_INDEX_URL of cae's environment when it has one): pip takes a wheel
 * from there before an equal one of the index. cae alone fills it, before the prepare's
 * install, once per requirements.txt: `pip download --only-binary=:all:` (wheels only: no
 * build, no code of any package runs) of the requirement lines it keeps (a name, extras,
 * version specifiers, markers and --hash options: no option, URL, path, file or variable,
 * which could make the fill take a wheel from elsewhere than the operator's index), with
 * the host's python3 (docker: the image's, in a container of cae's, so that the wheels are
 * of the image's Python and platform), an empty HOME and the operator's PIP_INDEX_URL,
 * PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, PIP_CERT and proxy variables from cae's own environment,
 * never the task's; the wheels are then published like Go's modules. What protects it: only cae
 * writes it, from the operator's index. pip checks a wheel's hash only where the project
 * pins hashes (--hash, --require-hashes); a wheel is otherwise trusted by its name, as the
 * index's would be. */
#define CAE_PKGCACHE_PIP_WHEELS CAE_PKGCACHE_INSIDE "/pip-wheels"

/* The shared wheels' directory into out (made, cae's, 0755, when make is set). 1: set; 0:
 * caches off (or, without make, not there); -errno with err set. */
int cae__pkgcache_pip_dir(const cae_config *cfg, bool make, char *out, size_t size, cae_error *err);
/* "PIP_FIND_LINKS=CAE_PKGCACHE_PIP_WHEELS" and PIP_INDEX_URL of cae's environment, when
 * it has one (NULL-terminated, static). */
const char *const *cae__pkgcache_pip_env(void);
/* The fill for requirements.txt's text. 1: filled; 0: caches off, no python3 with pip on
 * the host, nothing to fill, or already done for this text; -errno with err set (what was
 * downloaded is published all the same). */
int cae__pkgcache_pip_fill(const cae_config *cfg, const char *requirements, cae_error *err);
/* The fill for the requirements.txt of project on this host. */
int cae__pkgcache_pip_fill_project(const cae_config *cfg, const char *project, cae_error *err);
/* The fill for the requirements.txt of the pod being prepared (kubernetes: the host's
 * python3, as local's). */
int cae__pkgcache_pip_pod(struct cae_prepare *p, cae_error *err);
/* The fill for the requirements.txt of the container being prepared, in a container of
 * its image (its Python's wheels). */
int cae__pkgcache_pip_docker(struct cae_prepare *p, struct cae_docker *d, const char *container,
			     cae_error *err);

/* Maven's repository (pkgcache-maven.c): a Maven-layout directory of release artifacts,
 *   <state_dir>/package-cache/<instance key>/maven/<group dirs>/<artifact>/<version>/<file>
 * each .jar and .pom beside a .sha1 of cae's; files 0444, directories 0755, cae's; bound
 * read-only at CAE_PKGCACHE_MAVEN (local's sandbox, every container) and searched first by
 * Maven, for artifacts and plugins, through an active profile of cae's settings.xml
 * (cae__pkgcache_maven_settings): on local, the sandbox's global settings
 * (/etc/maven/settings.xml, where the host's, which may hold credentials, never is), which
 * also keep the local repository in the workspace (CAE_PKGCACHE_MAVEN_LOCAL_REPO); on
 * docker, the container user's ~/.m2/settings.xml, written by the prepare when there is
 * none; on kubernetes, served over HTTP instead (pkgcache-serve.c, under /maven/), the
 * pod user's ~/.m2/settings.xml naming it the same way. Maven copies what it takes from
 * there into the environment's own local repository, and asks the project's remotes for the
 * rest. cae alone fills it, after the prepare's
 * Maven install, for an environment that has the network itself (cae__net_full; the caller's test):
 * the names of the .jar and .pom files of the environment's local repository (listed with its exec:
 * names only, never a byte of them) that are a release's files in Maven's layout
 * (cae__pkgcache_maven_path_ok), at most 10000, are fetched with libcurl from the
 * operator's remote (command_executor.package_cache.maven_remote), each checked against the
 * remote's .sha1, else .sha512, where it publishes one (a mismatch is not shared), then
 * sealed and linked into place unless one is there (a release's files never change). Never
 * shared: maven-metadata.xml (which versions exist, the remote's answer) and snapshots.
 * What protects it: only cae writes it, with the remote's bytes; a task chooses at most
 * which of the remote's release files are fetched (Maven checks a file of its local
 * repository against nothing when it reads it). */
#define CAE_PKGCACHE_MAVEN CAE_PKGCACHE_INSIDE "/maven"
/* Where the local sandbox has cae's settings.xml (Maven's global settings). */
#define CAE_PKGCACHE_MAVEN_SETTINGS "/etc/maven/settings.xml"

/* The shared repository's directory into out (made, cae's, 0755, when make is set). 1:
 * set; 0: caches off (or, without make, not there); -errno with err set. */
int cae__pkgcache_maven_dir(const cae_config *cfg, bool make, char *out, size_t size,
			    cae_error *err);
/* The local sandbox's Maven repository of its own, in the workspace (cae's settings). */
#define CAE_PKGCACHE_MAVEN_LOCAL_REPO "/workspace/.m2/repository"
/* cae's settings.xml (static text), with <localRepository> CAE_PKGCACHE_MAVEN_LOCAL_REPO
 * when workspace_repo is set (local). */
const char *cae__pkgcache_maven_settings(bool workspace_repo);
/* The local text in <state_dir>/package-cache/<instance key>/maven-settings.xml (written when
 * missing or different), its path into out. 1: set; 0: caches off; -errno with err set. */
int cae__pkgcache_maven_settings_file(const cae_config *cfg, char *out, size_t size,
				      cae_error *err);
/* Whether path (relative to a repository's root) names a release's .jar or .pom in Maven's
 * layout: <group dirs>/<artifactId>/<version>/<artifactId>-<version>[-<classifier>].(jar|pom),
 * each part of letters, digits and . _ - + (none empty or starting with a dot), no
 * SNAPSHOT. */
bool cae__pkgcache_maven_path_ok(const char *path);
/* Whether path names a file the shared repository holds: such a .jar or .pom, or its .sha1
 * (what the server gives of it, pkgcache-serve.c; maven-metadata.xml never). */
bool cae__pkgcache_maven_file_ok(const char *path);
/* The fill for listing (paths relative to a repository's root, one a line, "./" before each
 * or not): the paths kept and not in the shared repository yet, once per such list. 1:
 * filled; 0: caches off or nothing to fetch; -errno with err set (what was fetched and
 * checked is published all the same). */
int cae__pkgcache_maven_fill(const cae_config *cfg, const char *listing, cae_error *err);
/* cae_deps_opts.maven_installed (ctx: the cae_prepare): the fill for the environment's
 * local repository (CAE_PKGCACHE_MAVEN_LOCAL_REPO, or ~/.m2/repository), listed with
 * p->exec; a failure is the prepare's warning. */
void cae__pkgcache_maven_installed(void *ctx);
/* Docker: in the container being prepared, when its project has a pom.xml, cae's settings
 * (without <localRepository>: a container's home is its own) as the user's
 * ~/.m2/settings.xml unless it has one (whether the image has mvn or not: a project's
 * Maven wrapper, mvnw, reads them too). 1: done (or nothing to do); 0: caches off; -errno
 * with err set. */
int cae__pkgcache_maven_docker(struct cae_prepare *p, cae_error *err);
/* Kubernetes, after the pod's clone: the same, with the served repository's settings
 * (cae__pkgcache_maven_settings_served), written only when the prepare's own stream serves
 * the caches (its commands have CAE_PKGCACHE_SERVE_URL_ENV); and, for a pod that has the
 * network itself, cae__pkgcache_maven_installed after its Maven install (p->deps_opts). A
 * failure is a warning of p. */
void cae__pkgcache_maven_pod(struct cae_prepare *p);
/* cae's settings for the repository served on the pod's loopback
 * (http://127.0.0.1:CAE_PKGCACHE_SERVE_PORT/maven), its profile active only for a Maven
 * whose environment has CAE_PKGCACHE_SERVE_URL_ENV=http://127.0.0.1:CAE_PKGCACHE_SERVE_PORT,
 * which only a stream that serves the caches gives its commands: a command of a stream
 * that could not listen (on the node's network, another pod's listener, or a task's
 * server, may hold the port) does not ask it (static text). Maven's http blocker
 * (external:http:*) leaves the loopback alone: only a host other than localhost and
 * 127.0.0.1 is external. */
const char *cae__pkgcache_maven_settings_served(void);

/* Kubernetes (pkgcache-serve.c): a pod is on a node, not on this host, and nothing of the
 * host is mounted into it (a hostPath volume would need a permission many clusters refuse,
 * and would break the pod's confinement). The read-only trees above are served to it
 * instead, over HTTP, by this process, through the channel it already has to the pod: its
 * helper listens on 127.0.0.1:CAE_PKGCACHE_SERVE_PORT in the pod (one socket, which no
 * other may share: no SO_REUSEPORT; on the node's network, hostNetwork, the ports are the
 * node's, and a pod whose port another holds takes the next free one of
 * CAE_PKGCACHE_SERVE_PORTS, its variables naming its own; with none free it warns and goes
 * without) and carries
 * each connection over its exec stream (src/helper/tun.c), as it carries the network proxy's;
 * every command run through that stream gets cae__pkgcache_serve_env (GOPROXY with
 * http://127.0.0.1:PORT/go-mod first, PIP_FIND_LINKS=http://127.0.0.1:PORT/pip-wheels/,
 * whose page links the wheels, and CAE_PKGCACHE_SERVE_URL_ENV=http://127.0.0.1:PORT, which
 * makes the profile of cae's Maven settings active: the Maven repository is under
 * /maven/, its settings written as the pod user's ~/.m2/settings.xml by the prepare,
 * cae__pkgcache_maven_pod). GET and HEAD only, a path of plain components beneath the tree
 * (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), regular files only, no dot file; under
 * /maven/ only what the fill publishes (a release's .jar or .pom and its .sha1,
 * cae__pkgcache_maven_file_ok: maven-metadata.xml, snapshots and every other name are not
 * found, and Maven then asks the project's remotes): the server reads, never writes, and
 * what it reads only cae wrote. Only for a pod whose network is its own (a filtered or no
 * network has its helper's listener carrying the proxy's connections instead: the caches
 * are not served there). The fills are the local backend's, on this host: Go's modules and
 * pip's wheels with the manifests read from the pod after its clone, Maven's with the
 * names its local repository lists after the prepare's Maven install. npm's cache is not
 * shared on kubernetes; the node_modules trees are, through API server execs
 * (pkgcache-npm-kubernetes.c, above), and Go's build cache is delivered into the pod's own
 * GOCACHE at its prepare (pkgcache-go-kubernetes.c, above). */
#define CAE_PKGCACHE_SERVE_PORT 3129
#define CAE_PKGCACHE_SERVE_PORTS 32 /* 3129 to 3160: the first free one */
#define CAE_PKGCACHE_SERVE_URL_ENV "CAE_PACKAGE_CACHE_URL"
struct cae_chan;
/* After c's stream opened (net-chan.c): the listener and the variables, when c's backend
 * serves the caches (cae_chan_ops.serve_caches), they are on, and c has no proxy. A
 * failure is logged (<backend>.package_cache_unavailable): commands then go to the
 * operator's proxy and index alone. */
void cae__pkgcache_serve_start(struct cae_chan *c);
/* When c's stream has closed (chan.c: no more connections come): its share of the server
 * let go (the connections still being served keep it until they end). */
void cae__pkgcache_serve_stop(struct cae_chan *c);
/* One environment's share of the server: the configuration whose trees it is served, and
 * its connections, at most CAE_PKGCACHE_SERVE_ENV_CONNS at once (of CAE_PKGCACHE_SERVE_CONNS
 * for every environment together), so that an environment holding its connections open
 * leaves the others theirs. Made with one reference, freed with the last. */
#define CAE_PKGCACHE_SERVE_ENV_CONNS 16
#define CAE_PKGCACHE_SERVE_CONNS 256
typedef struct cae_pkgcache_share cae_pkgcache_share;
cae_pkgcache_share *cae__pkgcache_share_new(const cae_config *cfg);
void cae__pkgcache_share_unref(cae_pkgcache_share *s);
/* Serves one connection fd (taken over) in a thread of its own, from the trees of ud (a
 * cae_pkgcache_share, which the thread holds a reference to); a cae_helper_conn_fn.
 * -EAGAIN (fd closed) when the environment or the server has all its connections. */
int cae__pkgcache_serve_conn(void *ud, char kind, int fd);
/* The variables of a server on port ("K=V" into env, their list NULL-terminated in envp). */
#define CAE_PKGCACHE_SERVE_ENV_N 4
void cae__pkgcache_serve_env(int port, char env[CAE_PKGCACHE_SERVE_ENV_N][4200],
			     const char *envp[CAE_PKGCACHE_SERVE_ENV_N + 1]);
/* After the pod's clone: cae's fills of the Go modules and pip wheels, for a pod that has
 * the network itself; a failure is a warning of p (a cold cache). (Maven's:
 * cae__pkgcache_maven_pod.) */
void cae__pkgcache_pod_fill(struct cae_prepare *p);

/* Shared by the fills (pkgcache-gomod.c): <state_dir>/package-cache/<instance key>/<name>
 * into out (0, -ENAMETOOLONG); name of sdfd copied into ddfd as an unnamed file (O_TMPFILE;
 * a file system without it: a temporary name), sealed (0444), then linked in place unless a
 * file of that name is there (a version's files never change; a fill killed at any point
 * leaves no file in ddfd but whole ones); FNV-1a of n bytes of s from h; a manifest of the project
 * (a regular file, not a link, at most 8 MiB), or of the container being prepared (cat as its user,
 * before any of the task's commands): 0 with *out NULL when there is none. */
int cae__pkgcache_path(const cae_config *cfg, const char *name, char *out, size_t size);
/* A shared directory of cae's, <state_dir>/package-cache/<instance key>/<name>, into out
 * (made, cae's, 0755, when make is set). 1: set; 0: caches off (or, without make, not
 * there); -errno with err set. */
int cae__pkgcache_shared_dir(const cae_config *cfg, const char *name, bool make, char *out,
			     size_t size, cae_error *err);
/* The subdirectory name of sdfd and of ddfd, opened (O_DIRECTORY, O_NOFOLLOW) into *s and
 * *t for a walk to go down: 0, or -errno with neither left open. */
int cae__pkgcache_open_pair(int sdfd, int ddfd, const char *name, int *s, int *t);
/* "NAME=value" appended to env (a JSON array; NULL: nothing) for each of the n names set
 * in cae's own environment (values under 4000 bytes): the operator's variables a fill in a
 * container passes on. */
void cae__pkgcache_env_append(json_t *env, const char *const *names, size_t n);
/* A fill in a container of its own (docker): body (a create body of image, consumed) run
 * as prefix-<hash of dir> (dir: the fill's directory on this host; one of that name left by
 * a fill that died is removed first) on a client of its own with timeout_ms, waited for and
 * removed. 0 when it exited 0; -EIO with *exit_code its status otherwise (-1: none), or
 * -errno, with err set (what: the fill, for the message). */
int cae__pkgcache_docker_fill(struct cae_docker *d, const char *prefix, const char *dir,
			      const char *image, json_t *body, int64_t timeout_ms, const char *what,
			      int *exit_code, cae_error *err);
/* The id (hex) of the image container runs, into key: 0, or -errno with err set. */
int cae__pkgcache_image_key(struct cae_docker *d, const char *container, char *key, size_t size,
			    cae_error *err);
/* Whether the fill of hash h is recorded in shared/.filled (recorded when set): in the
 * shared tree, so that a prune of the tree forgets its fills with it. */
bool cae__pkgcache_filled(const char *shared, uint64_t h, bool set);
/* shared/.used's mtime set to now (the prune's last use). */
void cae__pkgcache_used(const char *shared);
/* A fill's directories: the shared one of name (made) into shared, marked used, and the
 * fill's own (0700, out of the bound tree) of fill_name into fill. 1: go on; 0: caches
 * off; -errno with err set. */
int cae__pkgcache_fill_dirs(const cae_config *cfg, const char *name, const char *fill_name,
			    char shared[PATH_MAX], char fill[PATH_MAX], cae_error *err);
/* The fill of hash h: 0 when it is recorded (before or after taking fill's lock, held in
 * *lfd, to be closed by the caller), else 1 with fill/work made empty into work; -errno
 * with err set. */
int cae__pkgcache_fill_lock(const char *shared, const char *fill, uint64_t h, char *work,
			    size_t size, int *lfd, cae_error *err);
int cae__pkgcache_publish_file(int sdfd, const char *name, int ddfd);
uint64_t cae__pkgcache_fnv1a(uint64_t h, const char *s, size_t n);
int cae__pkgcache_manifest(const char *project, const char *name, char **out);
int cae__pkgcache_container_manifest(struct cae_prepare *p, const char *name, char **out,
				     cae_error *err);

/* The "K=V" entries (NULL-terminated, static) that point commands at the caches. */
const char *const *cae__pkgcache_env(void);

/* cae cache prune: removes this instance's owner caches (every instance's with all_instances)
 * unused for longer than max_age_s, then the least recently used ones until the rest take at
 * most max_bytes (0: no bound); with all, every one. Each removal is appended to removed
 * ({"cache": path, "bytes": n}) and counted in *count. */
int cae__pkgcache_prune(const cae_config *cfg, int64_t max_age_s, uint64_t max_bytes, bool all,
			bool all_instances, json_t *removed, int *count, cae_error *err);

#endif
