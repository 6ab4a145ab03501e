/* Prompt sections (command executor, text editor, environment selection) and the planner's
 * environment choice (the default, with a warning, when the choice is missing or invalid). */
#include "cae/prompt.h"
#include "cae/session.h"
#include "testutil.h"

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

static Suite *make_suite(void)
{
	Suite *s = suite_create("prompt");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, command_executor_prompt_filled);
	tcase_add_test(tc, text_editor_prompt);
	tcase_add_test(tc, environment_table_from_config);
	tcase_add_test(tc, select_environment);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
