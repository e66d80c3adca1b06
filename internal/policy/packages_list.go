package policy

// DefaultBlockedPackages are refused by pip_install unless the operator
// replaces the list (SANDBOX_BLOCKED_PACKAGES). Entries are PEP 503
// normalized.
//
// A session's site directory comes before the standard library on the
// interpreter's path, so a distribution named after a standard-library
// module would shadow it. No genuine project on PyPI uses these names; what
// sits there is squatted junk, long-dead Python 2 backports that break a
// modern interpreter, or malware (urllib, pwd and crypt were caught in
// 2017). Installers are refused because a copy in the session would
// replace the jail's own pip for later installs.
var DefaultBlockedPackages = []string{
	// The seed's list.
	"os", "subprocess", "sys", "importlib", "ctypes", "multiprocessing", "threading",
	// Processes, descriptors, users and the interpreter's own start-up.
	"socket", "shutil", "builtins", "signal", "pty", "resource", "fcntl", "select", "posix", "pwd",
	"grp", "crypt", "io", "pickle", "marshal", "tempfile", "pathlib", "glob", "runpy", "site",
	"sitecustomize", "usercustomize", "encodings", "codecs", "zipimport",
	// Networking, hashing and logging, the usual squatting targets.
	"urllib", "urllib2", "http", "ssl", "hashlib", "smtplib", "ftplib", "telnetlib", "logging",
	"uuid", "asyncio", "sqlite3",
	// Installers. setuptools and wheel stay allowed: builds need them.
	"pip", "pipx", "pipenv", "uv", "poetry", "pdm", "conda",
}

// PopularPackages are often-installed PyPI projects (PEP 503 normalized),
// the names [Typosquat] compares against: the ones people type, rather
// than every dependency high in the download counts. A few long-standing
// projects whose names sit one edit from another entry (boto, jinja,
// psycopg, markdown2, pycryptodomex, toml and tomli) are listed so that
// they are not mistaken for typos.
var PopularPackages = []string{
	// Packaging and HTTP.
	"setuptools", "wheel", "packaging", "pip", "virtualenv", "build", "twine", "setuptools-scm",
	"requests", "urllib3", "certifi", "charset-normalizer", "idna", "chardet", "requests-oauthlib",
	"oauthlib", "httpx", "aiohttp", "websockets", "websocket-client",
	// Cloud SDKs.
	"boto3", "boto", "awscli", "moto", "google-auth", "google-cloud-storage", "grpcio", "protobuf",
	"azure-core",
	// Language support.
	"six", "typing-extensions", "python-dateutil", "pytz", "attrs", "decorator", "pydantic",
	"future", "dill", "cloudpickle", "regex", "tabulate", "tqdm", "colorama", "termcolor", "click",
	"rich", "pygments", "python-dotenv", "tenacity", "backoff", "loguru", "psutil", "greenlet",
	"cython", "arrow",
	// Formats.
	"pyyaml", "toml", "tomli", "simplejson", "ujson", "orjson", "jsonschema", "lxml",
	"beautifulsoup4", "openpyxl", "xlrd", "xlsxwriter", "markdown", "markdown2", "docutils",
	"msgpack",
	// Security.
	"cryptography", "pyopenssl", "pyjwt", "rsa", "pyasn1", "bcrypt", "pynacl", "paramiko",
	"pycryptodome", "pycryptodomex", "passlib", "itsdangerous",
	// Web and databases.
	"flask", "werkzeug", "jinja2", "jinja", "markupsafe", "django", "djangorestframework",
	"fastapi", "starlette", "uvicorn", "gunicorn", "python-multipart", "tornado", "sqlalchemy",
	"alembic", "psycopg", "psycopg2", "psycopg2-binary", "pymysql", "pymongo", "redis", "celery",
	"marshmallow",
	// Science and machine learning.
	"numpy", "scipy", "pandas", "matplotlib", "seaborn", "plotly", "pillow", "scikit-learn",
	"joblib", "networkx", "sympy", "statsmodels", "pyarrow", "polars", "dask", "numba", "xgboost",
	"lightgbm", "torch", "torchvision", "tensorflow", "keras", "transformers", "opencv-python",
	"nltk", "spacy", "pyparsing", "h5py", "openai",
	// Development and notebooks.
	"pytest", "pytest-cov", "pytest-mock", "coverage", "mock", "tox", "black", "flake8", "isort",
	"pylint", "mypy", "pre-commit", "ipython", "jupyter", "notebook", "prompt-toolkit", "jedi",
	"docker", "kubernetes", "gitpython", "selenium", "pyserial", "pyzmq", "sentry-sdk",
}
