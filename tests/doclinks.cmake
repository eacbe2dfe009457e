# Doc links that cannot rot (tools/doclinks.py): every relative link in docs/*.md, docs/history/*.md,
# README.md and the step cards points at an existing file or heading, and every kernel.cu#Lx-Ly link at the lines
# recorded in docs/links.lock. When code moves: python3 tools/doclinks.py fix, then check.
add_test(NAME cpu.doc_links COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/doclinks.py check)
set_tests_properties(cpu.doc_links PROPERTIES LABELS cpu)
