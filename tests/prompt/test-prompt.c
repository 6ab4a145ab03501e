/* Prompt sections (command executor, text editor, environment selection), the set of them
 * that `cae prompt` and `cae mcp` share (list, arguments, instructions), and the planner's
 * environment choice (the default, with a warning, when the choice is missing or invalid). */
#include "cae/prompt.h"
#include "cae/session.h"
#include "prompt/prompt-internal.h"
#include "testutil.h"

#include <errno.h>

static cae_config *cfg_from(const char *yaml)
{
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg, yaml, strlen(yaml), "t.yaml", envp, &err) == 0,
		      "%s", err.message);
	return cfg;
}

START_TEST(command_executor_prompt_filled)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\n");
	cae_error err;
	cae_policy *p = cae_policy_from_config(cfg, &err);
	char *t = cae_prompt_command_executor(cfg, p);
	ck_assert_ptr_nonnull(strstr(t, "## Command Execution Feature"));
	ck_assert_ptr_null(strstr(t, "{allowed_commands_list}"));
	/* the default list's lines, exactly */
	ck_assert_ptr_nonnull(strstr(
	    t, "\nBuild/Package Management: npm, yarn, pnpm, pip, pip3, conda, mamba, python, "
	       "python3, cargo, make, cmake, bundle, gem, composer, dotnet\n"));
	ck_assert_ptr_nonnull(strstr(t, "\nVersion Control: git status, git diff, git log, git "
					"branch, git show, git blame\n"));
	ck_assert_ptr_nonnull(strstr(t, "**Python environment**: `pip install <package>`"));
	free(t);
	cae_policy_free(p);
	cae_config_free(cfg);
	cfg =
	    cfg_from("command_executor:\n  enabled: false\n  state_dir: /tmp\n  allowed_commands:\n"
		     "    exclude: [curl]\n");
	p = cae_policy_from_config(cfg, &err);
	t = cae_prompt_command_executor(cfg, p);
	ck_assert_str_eq(t, "");
	free(t);
	cfg->command_executor.enabled = true;
	t = cae_prompt_command_executor(cfg, p);
	ck_assert_ptr_null(strstr(t, "curl"));
	free(t);
	cae_policy_free(p);
	cae_config_free(cfg);
}
END_TEST

/* The section for an environment lists the tools that exist there (cae's image's list; on
 * the local backend those of it this host has), names the backend as it is, and says how the
 * dependency step went (issue 23: it said "Docker" on every backend, "Dependencies:
 * Automatically installed" after a failed install, and make, cmake and cargo everywhere). */
START_TEST(command_executor_prompt_environment)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\n");
	cae_error err;
	cae_policy *p = cae_policy_from_config(cfg, &err);
	const char *const backends[] = {"docker", "kubernetes", "local"};
	const char *const names[] = {"Docker container", "Kubernetes pod", "sandbox on this host"};
	for (size_t i = 0; i < 3; i++) {
		cae_prompt_context c = {.backend = backends[i], .environment = "go"};
		char *t = cae_prompt_command_executor_for(cfg, p, &c);
		ck_assert_msg(strstr(t, names[i]) != NULL, "%s: %s", backends[i], t);
		if (strcmp(backends[i], "docker") != 0)
			ck_assert_msg(strstr(t, "Docker") == NULL, "%s: %s", backends[i], t);
		ck_assert_ptr_null(strstr(t, "Automatically installed"));
		ck_assert_ptr_null(strstr(t, "{environment_tools}"));
		if (i < 2) { /* cae's go image: go and the toolchain, no cargo, no mvn */
			ck_assert_msg(strstr(t, "`go`, `gofmt`, `make`, `gcc`, `g++`"), "%s", t);
			ck_assert_ptr_nonnull(strstr(t, "`go test ./...`"));
		}
		/* the tools list names no tool the image lacks (cargo, cmake, mvn) */
		const char *tools = strstr(t, "### Tools in This Environment");
		const char *end = tools ? strstr(tools, "### Allowed Commands") : NULL;
		ck_assert(tools && end);
		char *list = strndup(tools, (size_t)(end - tools));
		ck_assert_msg(!strstr(list, "cargo") && !strstr(list, "cmake") &&
				  !strstr(list, "mvn"),
			      "%s", list);
		free(list);
		free(t);
	}
	/* java has mvn and gradle; a custom image's tools are not claimed */
	cae_prompt_context c = {.backend = "docker", .environment = "java"};
	char *t = cae_prompt_command_executor_for(cfg, p, &c);
	ck_assert_ptr_nonnull(strstr(t, "`java`, `javac`, `mvn`, `gradle`, `make`"));
	free(t);
	c.environment = "custom";
	t = cae_prompt_command_executor_for(cfg, p, &c);
	ck_assert_ptr_nonnull(strstr(t, "are not known to cae"));
	free(t);
	/* the dependency step as it went: a failure is said, with what to do */
	json_t *deps = json_loads("[{\"manifest\": \"package.json\", \"command\": \"npm ci\", "
				  "\"success\": false, \"exit_code\": 1, \"error\": "
				  "\"dependency install `npm ci` failed with exit code 1\"}]",
				  0, NULL);
	c = (cae_prompt_context){.backend = "docker", .environment = "node", .deps = deps};
	t = cae_prompt_command_executor_for(cfg, p, &c);
	ck_assert_msg(strstr(t, "- Dependencies: `npm ci` (package.json): FAILED"), "%s", t);
	ck_assert_ptr_nonnull(strstr(t, "Install what failed or was skipped yourself"));
	free(t);
	json_decref(deps);
	deps = json_array();
	c.deps = deps;
	t = cae_prompt_command_executor_for(cfg, p, &c);
	ck_assert_ptr_nonnull(strstr(t, "- Dependencies: none installed"));
	free(t);
	json_decref(deps);
	cae_policy_free(p);
	cae_config_free(cfg);
	/* off: said so */
	cfg = cfg_from("command_executor:\n  state_dir: /tmp\n  clone:\n    auto_install_deps: "
		       "false\n");
	p = cae_policy_from_config(cfg, &err);
	t = cae_prompt_command_executor_for(cfg, p, &c);
	ck_assert_ptr_nonnull(strstr(t, "- Dependencies: none installed"));
	free(t);
	t = cae_prompt_command_executor(cfg, p);
	ck_assert_ptr_nonnull(strstr(t, "- Dependencies: not installed automatically"));
	free(t);
	/* the prompts' environment argument chooses the environment */
	cae_prompts *ps = NULL;
	ck_assert_int_eq(cae_prompts_new(cfg, p, &ps, &err), 0);
	json_t *a = json_pack("{s:s}", "environment", "go");
	ck_assert_int_eq(cae_prompts_get(ps, "command-executor", a, &t, &err), 0);
	ck_assert_ptr_nonnull(strstr(t, "`go`, `gofmt`"));
	free(t);
	json_decref(a);
	a = json_pack("{s:s}", "environment", "rust");
	ck_assert_int_eq(cae_prompts_get(ps, "command-executor", a, &t, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "no environment \"rust\""));
	json_decref(a);
	cae_prompts_free(ps);
	cae_policy_free(p);
	cae_config_free(cfg);
}
END_TEST

START_TEST(text_editor_prompt)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\n");
	char *t = cae_prompt_text_editor(cfg);
	ck_assert_ptr_nonnull(strstr(t, "## Text Editor Tool"));
	ck_assert_ptr_nonnull(strstr(t, "## Git Workflow for File Changes"));
	ck_assert_ptr_nonnull(strstr(t, "git pull --rebase origin <branch_name>"));
	free(t);
	cfg->text_editor_mcp.enabled = false;
	t = cae_prompt_text_editor(cfg);
	ck_assert_str_eq(t, "");
	free(t);
	cae_config_free(cfg);
}
END_TEST

START_TEST(environment_table_from_config)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\n  environments:\n"
				   "    python: img-py:1\n    rust: img-rust:2\n");
	char *t = cae_prompt_environment_selection(cfg);
	ck_assert_ptr_nonnull(strstr(t, "## Execution Environment Selection"));
	ck_assert_ptr_nonnull(
	    strstr(t, "| python | img-py:1 | Pure Python projects, Django/Flask |"));
	ck_assert_ptr_nonnull(strstr(t, "| rust | img-rust:2 | Custom environment |"));
	ck_assert_ptr_null(strstr(t, "node"));
	ck_assert_ptr_nonnull(strstr(t, "selected_environment"));
	free(t);
	cae_config_free(cfg);
}
END_TEST

static void expect(cae_config *cfg, const char *text, const char *name, bool fallback)
{
	cae_env_selection sel;
	ck_assert_int_eq(cae_prompt_select_environment(cfg, text, strlen(text), &sel), 0);
	ck_assert_msg(strcmp(sel.name, name) == 0, "%s -> %s", text, sel.name);
	ck_assert(sel.fallback == fallback);
	if (fallback) {
		ck_assert_ptr_nonnull(sel.warning);
		ck_assert_ptr_nonnull(sel.comment);
		ck_assert_ptr_nonnull(strstr(sel.comment, "\"python\""));
	} else {
		ck_assert_ptr_null(sel.comment);
	}
	cae_env_selection_clear(&sel);
}

START_TEST(select_environment)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\n");
	expect(cfg, "{\"selected_environment\": {\"name\": \"node\", \"reasoning\": \"r\"}}",
	       "node", false);
	expect(cfg,
	       "Plan:\n```json\n{\"phase\": \"planning\", \"selected_environment\": {\"name\": "
	       "\"go\"}}\n```\nThanks.",
	       "go", false);
	expect(cfg, "I chose {\"selected_environment\": {\"name\": \"java\"}} for this.", "java",
	       false);
	expect(cfg, "{\"other\": {\"x\": 1}} then {\"selected_environment\": {\"name\": \"node\"}}",
	       "node", false);
	expect(cfg, "{\"selected_environment\": \"miniforge\"}", "miniforge", false);
	/* fallbacks */
	expect(cfg, "{\"phase\": \"planning\"}", "python", true);
	expect(cfg, "{\"selected_environment\": {\"name\": \"cobol\"}}", "python", true);
	expect(cfg, "{\"selected_environment\": {\"reasoning\": \"no name\"}}", "python", true);
	expect(cfg, "{\"selected_environment\": {\"name\": \"node\"", "python", true);
	expect(cfg, "", "python", true);
	cae_env_selection sel;
	const char *unknown = "{\"selected_environment\": {\"name\": \"cobol\"}}";
	cae_prompt_select_environment(cfg, unknown, strlen(unknown), &sel);
	ck_assert_str_eq(sel.requested, "cobol");
	ck_assert_ptr_nonnull(strstr(sel.comment, "cobol"));
	cae_env_selection_clear(&sel);
	cae_config_free(cfg);
}
END_TEST

/* The set of sections of cfg, with its policy. */
static cae_prompts *prompts_of(const cae_config *cfg)
{
	cae_error err;
	cae_policy *p = cae_policy_from_config(cfg, &err);
	ck_assert_msg(p != NULL, "%s", err.message);
	cae_prompts *ps;
	ck_assert_msg(cae_prompts_new(cfg, p, &ps, &err) == 0, "%s", err.message);
	cae_policy_free(p);
	return ps;
}

/* cae_prompts_get of name with args given as JSON text (NULL: none); returns its code,
 * *text set on success. */
static int get(const cae_prompts *ps, const char *name, const char *args_json, char **text,
	       cae_error *err)
{
	json_t *args =
	    args_json ? json_loads(args_json, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
	ck_assert(!args_json || args);
	int r = cae_prompts_get(ps, name, args, text, err);
	json_decref(args);
	ck_assert(r == 0 ? *text != NULL : *text == NULL);
	return r;
}

/* Every section of the set is the section function's text, for two configurations; the list
 * names the enabled ones; the instructions join the first two. */
START_TEST(prompt_set_is_the_sections)
{
	const char *yamls[] = {
	    "command_executor:\n  state_dir: /tmp\n",
	    "command_executor:\n  state_dir: /tmp\n  allowed_commands:\n    exclude: [curl]\n"
	    "    additional: [frobnicate]\n  environments:\n    python: img-py:1\n"
	    "    rust: img-rust:2\n",
	};
	for (size_t i = 0; i < sizeof(yamls) / sizeof(yamls[0]); i++) {
		cae_config *cfg = cfg_from(yamls[i]);
		cae_error err;
		cae_policy *pol = cae_policy_from_config(cfg, &err);
		char *want[3] = {cae_prompt_command_executor(cfg, pol), cae_prompt_text_editor(cfg),
				 cae_prompt_environment_selection(cfg)};
		const char *names[3] = {"command-executor", "text-editor", "environment-selection"};
		cae_prompts *ps = prompts_of(cfg);
		json_t *list = cae_prompts_list(ps);
		ck_assert_uint_eq(json_array_size(list), 3);
		for (size_t k = 0; k < 3; k++) {
			char *t;
			ck_assert_int_eq(get(ps, names[k], NULL, &t, &err), 0);
			ck_assert_str_eq(t, want[k]);
			free(t);
			ck_assert_int_eq(get(ps, names[k], "{}", &t, &err), 0);
			ck_assert_str_eq(t, want[k]);
			free(t);
			json_t *item = json_array_get(list, k);
			ck_assert_str_eq(json_string_value(json_object_get(item, "name")),
					 names[k]);
			ck_assert_str_eq(json_string_value(json_object_get(item, "description")),
					 cae_prompts_description(names[k]));
			ck_assert(json_is_string(json_object_get(item, "title")));
			ck_assert(json_is_array(json_object_get(item, "arguments")));
			ck_assert(cae_prompts_offered(ps, names[k]));
		}
		if (i == 1) {
			ck_assert_ptr_nonnull(strstr(want[0], "frobnicate"));
			ck_assert_ptr_null(strstr(want[0], "curl"));
			ck_assert_ptr_nonnull(strstr(want[2], "| rust | img-rust:2 |"));
		}
		char *joined;
		ck_assert_int_ge(asprintf(&joined, "%s\n%s", want[0], want[1]), 0);
		ck_assert_str_eq(cae_prompts_instructions(ps), joined);
		free(joined);
		json_decref(list);
		cae_prompts_free(ps);
		for (size_t k = 0; k < 3; k++)
			free(want[k]);
		cae_policy_free(pol);
		cae_config_free(cfg);
	}
}
END_TEST

/* A disabled feature's sections are not offered and not in the instructions; `cae prompt`
 * still prints them as "". */
START_TEST(prompt_set_follows_the_features)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\ntext_editor_mcp:\n"
				   "  enabled: false\n");
	cae_prompts *ps = prompts_of(cfg);
	json_t *list = cae_prompts_list(ps);
	ck_assert_uint_eq(json_array_size(list), 2);
	ck_assert(!cae_prompts_offered(ps, "text-editor"));
	cae_error err;
	char *t;
	ck_assert_int_eq(get(ps, "text-editor", NULL, &t, &err), 0);
	ck_assert_str_eq(t, "");
	free(t);
	char *ce;
	ck_assert_int_eq(get(ps, "command-executor", NULL, &ce, &err), 0);
	ck_assert_str_eq(cae_prompts_instructions(ps), ce); /* no separator, nothing after */
	free(ce);
	json_decref(list);
	cae_prompts_free(ps);
	cae_config_free(cfg);

	cfg = cfg_from("command_executor:\n  enabled: false\n  state_dir: /tmp\n");
	ck_assert_int_eq(cae_prompts_new(cfg, NULL, &ps, &err), 0); /* no policy needed */
	list = cae_prompts_list(ps);
	ck_assert_uint_eq(json_array_size(list), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "name")),
			 "text-editor");
	ck_assert(!cae_prompts_offered(ps, "command-executor"));
	ck_assert(!cae_prompts_offered(ps, "environment-selection"));
	char *te = cae_prompt_text_editor(cfg);
	ck_assert_str_eq(cae_prompts_instructions(ps), te);
	free(te);
	json_decref(list);
	cae_prompts_free(ps);
	cfg->text_editor_mcp.enabled = false;
	ck_assert_int_eq(cae_prompts_new(cfg, NULL, &ps, &err), 0);
	ck_assert_ptr_null(cae_prompts_instructions(ps));
	list = cae_prompts_list(ps);
	ck_assert_uint_eq(json_array_size(list), 0);
	json_decref(list);
	cae_prompts_free(ps);
	/* the command executor's section cannot be made without the policy */
	cfg->command_executor.enabled = true;
	ck_assert_int_eq(cae_prompts_new(cfg, NULL, &ps, &err), -EINVAL);
	ck_assert_ptr_null(ps);
	cae_config_free(cfg);
}
END_TEST

/* The text editor's branch argument fills in every <branch_name>, and nothing else; what a
 * hostile client could send is refused with a reason, never half applied. */
START_TEST(prompt_arguments)
{
	cae_config *cfg = cfg_from("command_executor:\n  state_dir: /tmp\n");
	cae_prompts *ps = prompts_of(cfg);
	json_t *list = cae_prompts_list(ps);
	json_t *args = json_object_get(json_array_get(list, 1), "arguments");
	ck_assert_uint_eq(json_array_size(args), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(args, 0), "name")),
			 "branch");
	ck_assert(json_is_false(json_object_get(json_array_get(args, 0), "required")));
	ck_assert(json_is_string(json_object_get(json_array_get(args, 0), "description")));
	json_decref(list);
	cae_error err;
	char *plain, *t;
	ck_assert_int_eq(get(ps, "text-editor", NULL, &plain, &err), 0);
	ck_assert_int_eq(get(ps, "text-editor", "{\"branch\": \"feature/limits-1.2\"}", &t, &err),
			 0);
	ck_assert_ptr_null(strstr(t, "<branch_name>"));
	ck_assert_ptr_nonnull(strstr(t, "git push origin feature/limits-1.2\n"));
	ck_assert_ptr_nonnull(strstr(t, "git pull --rebase origin feature/limits-1.2\n"));
	char *back = cae__prompt_replace(t, "feature/limits-1.2", "<branch_name>");
	ck_assert_str_eq(back, plain); /* only the placeholder changed */
	free(back);
	free(t);
	free(plain);
	const char *bad[] = {
	    "{\"branch\": \"a b\"}",
	    "{\"branch\": \"main\\ngit push --force\"}",
	    "{\"branch\": \"x\\ty\"}",
	    "{\"branch\": \"-f\"}",
	    "{\"branch\": \"a..b\"}",
	    "{\"branch\": \"a~1\"}",
	    "{\"branch\": \"a\\\\b\"}",
	    "{\"branch\": \"\"}",
	    "{\"branch\": \"a\\u0000b\"}",
	    "{\"branch\": \"x\\u007f\"}",
	    "{\"branch\": 5}",
	    "{\"branch\": null}",
	    "{\"branch\": [\"main\"]}",
	    "{\"Branch\": \"main\"}",
	    "{\"branch\": \"main\", \"extra\": \"x\"}",
	    "[\"main\"]",
	    "\"main\"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cae_error_clear(&err);
		ck_assert_msg(get(ps, "text-editor", bad[i], &t, &err) == -EINVAL, "%s accepted",
			      bad[i]);
		ck_assert_msg(strstr(err.message, "text-editor") != NULL, "%s: %s", bad[i],
			      err.message);
	}
	/* the length limit, at its edge */
	char name[300];
	memset(name, 'b', sizeof(name));
	name[255] = '\0';
	json_t *a = json_pack("{s:s}", "branch", name);
	ck_assert_int_eq(cae_prompts_get(ps, "text-editor", a, &t, &err), 0);
	free(t);
	json_decref(a);
	name[255] = 'b';
	name[256] = '\0';
	a = json_pack("{s:s}", "branch", name);
	ck_assert_int_eq(cae_prompts_get(ps, "text-editor", a, &t, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "255"));
	json_decref(a);
	/* a section takes only its own arguments (command-executor: environment) */
	ck_assert_int_eq(get(ps, "command-executor", "{\"branch\": \"main\"}", &t, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "takes environment"));
	ck_assert_int_eq(get(ps, "environment-selection", "{\"branch\": \"main\"}", &t, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "takes none"));
	/* unknown names */
	ck_assert_int_eq(get(ps, "no-such-section", NULL, &t, &err), -ENOENT);
	ck_assert_int_eq(get(ps, "Text-Editor", NULL, &t, &err), -ENOENT);
	ck_assert_int_eq(get(ps, "", NULL, &t, &err), -ENOENT);
	ck_assert_int_eq(cae_prompts_get(ps, NULL, NULL, &t, &err), -ENOENT);
	ck_assert_ptr_null(cae_prompts_description("no-such-section"));
	cae_prompts_free(ps);
	cae_config_free(cfg);
}
END_TEST

/* A required argument is checked by the same code every section's arguments go through. */
START_TEST(prompt_required_argument)
{
	static const cae_prompt_arg args[] = {
	    {.name = "who", .description = "who to greet", .required = true, .token = "<who>"},
	    {.name = "how", .description = "how", .required = false, .token = "<how>"},
	};
	const cae_prompt_section s = {
	    .name = "greeting", .title = "t", .description = "d", .args = args, .nargs = 2};
	cae_error err;
	char *out;
	ck_assert_int_eq(cae__prompt_apply_args(&s, "hello <who> <how>", NULL, &out, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "needs the argument \"who\""));
	json_t *a = json_pack("{s:s}", "how", "loudly");
	ck_assert_int_eq(cae__prompt_apply_args(&s, "hello <who> <how>", a, &out, &err), -EINVAL);
	ck_assert_ptr_null(out);
	json_object_set_new(a, "who", json_string("world"));
	ck_assert_int_eq(cae__prompt_apply_args(&s, "hello <who> <how>", a, &out, &err), 0);
	ck_assert_str_eq(out, "hello world loudly");
	free(out);
	json_object_set_new(a, "whom", json_string("x"));
	ck_assert_int_eq(cae__prompt_apply_args(&s, "hello <who> <how>", a, &out, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "(it takes who, how)"));
	json_decref(a);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("prompt");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, command_executor_prompt_filled);
	tcase_add_test(tc, command_executor_prompt_environment);
	tcase_add_test(tc, text_editor_prompt);
	tcase_add_test(tc, environment_table_from_config);
	tcase_add_test(tc, select_environment);
	tcase_add_test(tc, prompt_set_is_the_sections);
	tcase_add_test(tc, prompt_set_follows_the_features);
	tcase_add_test(tc, prompt_arguments);
	tcase_add_test(tc, prompt_required_argument);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
