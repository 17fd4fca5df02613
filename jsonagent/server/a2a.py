def mount(app, runner, base_url):
    pass
