/* Unit tests: jobd/ui (the embedded dashboard files: lookup, types, ETags,
 * the page-weight cap). The routes are tested over HTTP in tests/py/test_ui.py. */
#include <string.h>

#include "jobd/ui/ui.h"
#include "tests/th.h"

TEST(ui_files_are_embedded_with_types_and_etags)
{
    const struct ui_file *index = ui_file_find("");
    CHECK(index != NULL);
    CHECK_EQ_STR(index->name, "index.html");
    CHECK_EQ_STR(index->content_type, "text/html; charset=utf-8");
    CHECK(index->len > 0 && strstr(index->data, "/ui/app.js") != NULL);
    CHECK(ui_file_find("index.html") == index);
    const struct ui_file *js = ui_file_find("app.js");
    CHECK(js != NULL);
    CHECK_EQ_STR(js->content_type, "text/javascript; charset=utf-8");
    const struct ui_file *css = ui_file_find("app.css");
    CHECK(css != NULL);
    CHECK_EQ_STR(css->content_type, "text/css; charset=utf-8");
    CHECK_EQ_INT((int)strlen(js->etag), 18); /* "\"" + 16 hex + "\"" */
    CHECK(strcmp(js->etag, css->etag) != 0);
}

TEST(ui_file_find_refuses_paths_and_unknown_names)
{
    CHECK(ui_file_find(NULL) == NULL);
    CHECK(ui_file_find("nope.js") == NULL);
    CHECK(ui_file_find("../app.js") == NULL);
    CHECK(ui_file_find(".hidden") == NULL);
    CHECK(ui_file_find("x/app.js") == NULL);
}

TEST(ui_page_weight_under_200kb)
{
    size_t n = ui_total_bytes();
    CHECK(n > 1000);
    CHECK(n < 200 * 1000);
}
