from streamlit.testing.v1 import AppTest
from components import keys
from tests.app.conftest import APP, ok
def test_x(tiny_app):
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[keys.store_key(keys.MAX_NEW_TOKENS)] = 4
    ok(at.run().switch_page("pages/1_Dual_Path.py").run())
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Q of A?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("C of A.")
    at.button(key=keys.RUN).click().run()
    print("EXC", at.exception, [e.value for e in at.error], [i.value for i in at.info], [w.value for w in at.warning])
    print("RES", len(at.session_state[keys.RESULTS]) if keys.RESULTS in at.session_state else None)
