/* The one way cae starts git in a workspace: what an agent wrote into the repository (its
 * .git/config, hooks, .gitattributes) must never run in cae's own git steps (clone, fetch,
 * auto-commit, a patch's git_operation, the bundle of a local repository). Owned by no module:
 * backend and worker both include it.
 *
 * By command-line overrides, not by trusting the repository: a `-c` setting is read after
 * every configuration file (system, global, the repository's, its includes), so it wins over
 * a single-valued key; for a multi-valued key an empty value resets the list. Every argv cae
 * builds for git starts with CAE_GIT_ARGV (scripts/lint.sh refuses one that does not):
 *   core.hooksPath=/dev/null    no hook runs (hooks are looked up under a path that is not
 *                               a directory)
 *   core.fsmonitor=false        no file-system monitor command
 *   core.sshCommand=ssh         the ssh on PATH, not one the repository names
 *   core.askPass=               no askpass program from the repository
 *   core.alternateRefsCommand=  no command to list an alternate's references
 *   credential.helper=          no credential helper (a step that needs one adds its own
 *                               after this reset, through the environment)
 *   protocol.ext.allow=never    no ext:: transport (a command line as a URL)
 *   commit.gpgSign=false, tag.gpgSign=false, gpg.program=false, gpg.ssh.program=false,
 *   gpg.x509.program=false, gpg.ssh.defaultKeyCommand=
 *                               no signing program from the repository, even for a commit
 *                               asked to sign (-S)
 *   gc.auto=0, maintenance.auto=false         no background gc or maintenance after a commit
 *   submodule.recurse=false, fetch.recurseSubmodules=false, diff.ignoreSubmodules=dirty
 *                               no git run inside a submodule (its own configuration is not
 *                               covered by the resets of filter drivers below)
 *   --no-pager, core.pager=cat, core.editor=:, interactive.diffFilter=cat
 *                               no pager, editor or diff filter program from the repository
 *
 * What a key cannot reset: drivers named by the repository itself (filter.<name>.clean,
 * .smudge, .process run on add and checkout; diff.<name>.textconv and .command;
 * merge.<name>.driver). The worker reads their names from the repository's configuration
 * and resets each one (src/worker/command.c), the global configuration's too (the
 * environment user's own file); diff commands pass --no-ext-diff and --no-textconv.
 * uploadpack.packObjectsHook is honoured by git only from the system and global
 * configuration (never -c): the only upload-pack cae starts in a workspace serves the fetches
 * of prepare, before any command of the agent ran. */
#ifndef CAE_BASE_GITSAFE_H
#define CAE_BASE_GITSAFE_H

#define CAE_GIT_ARGV                                                                               \
	"git", "--no-pager", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", \
	    "core.sshCommand=ssh", "-c", "core.askPass=", "-c",                                    \
	    "core.alternateRefsCommand=", "-c", "credential.helper=", "-c",                        \
	    "protocol.ext.allow=never", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false",   \
	    "-c", "gpg.program=false", "-c", "gpg.ssh.program=false", "-c",                        \
	    "gpg.x509.program=false", "-c", "gpg.ssh.defaultKeyCommand=", "-c", "gc.auto=0", "-c", \
	    "maintenance.auto=false", "-c", "submodule.recurse=false", "-c",                       \
	    "fetch.recurseSubmodules=false", "-c", "diff.ignoreSubmodules=dirty", "-c",            \
	    "core.pager=cat", "-c", "core.editor=:", "-c", "interactive.diffFilter=cat"

/* How many strings CAE_GIT_ARGV is. */
#define CAE_GIT_ARGC 44

#endif
