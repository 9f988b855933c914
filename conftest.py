
def pytest_addoption(parser):
    parser.getgroup("parityfuzz").addoption(
        "--export-all", action="store_true", default=False,
        help="tests/test_export.py: run the exported script of every corpus file the export covers (CI: one per "
             "family and verdict kind)")
