# The analysis package (analysis/t5scale_analyze) and the t5scale-analyze command: pytest on run files written to
# the run-file schema by analysis/tests/runfile_writer.py (a study of several world sizes and LR rules, a file still
# being written by a SWMR writer, a file whose writer was SIGKILLed, files of other formats, an empty folder).
set(T5SCALE_ANALYSIS_DIR ${CMAKE_CURRENT_LIST_DIR}/../../analysis)
add_test(NAME analysis.pytest
         COMMAND ${T5SCALE_PYTHON} -m pytest -q -p no:cacheprovider ${T5SCALE_ANALYSIS_DIR}/tests)
set_tests_properties(analysis.pytest PROPERTIES LABELS analysis TIMEOUT 600
                     ENVIRONMENT "PYTHONPATH=${T5SCALE_ANALYSIS_DIR};T5SCALE_PYTHON=${T5SCALE_PYTHON};MPLBACKEND=Agg;PYTHONDONTWRITEBYTECODE=1")
